/**
 * Properties of the request readers' checks: the depth scan over bytes and the walk over a
 * parsed value agree with the true nesting of every JSON value; no body the checks accept
 * nests past the bound (so nothing recursive downstream can overflow on it), and no bytes make
 * them throw; the time bound is a number that works or a `RangeError`, over every number.
 */

import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { requestBodyDefaults } from '../../src/advanced.js'
import { openaiChat, readClientRequest } from '../../src/index.js'
import { checkClientBody, checkParsedBody } from '../../src/retry/request/client-request.js'
import { measureValue, nestsDeeperThan } from '../../src/retry/request/json-depth.js'
import { runs } from '../support/runs.js'

const numRuns = runs(200)
const encode = (text: string) => new TextEncoder().encode(text)

/** The nesting depth of a JSON value, the top-level object or array being level 1. */
function depthOf(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0
  const members = Array.isArray(value) ? value : Object.values(value)
  return 1 + Math.max(0, ...members.map(depthOf))
}

/** JSON values whose strings are full of what a scanner could mistake for structure. */
const trickyString = fc
  .array(
    fc.constantFrom('[', ']', '{', '}', '"', '\\', '\\"', 'é', '🦊', '\u2028', 'a', ':', ','),
    {
      maxLength: 12,
    },
  )
  .map((parts) => parts.join(''))
const jsonValue = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.oneof(trickyString, fc.integer(), fc.boolean(), fc.constant(null)),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(trickyString, tie('value'), { maxKeys: 4 }),
  ),
})).value
/** A value wrapped `extra` levels deeper, to reach past small bounds. */
const deepJson = fc
  .tuple(jsonValue, fc.nat({ max: 40 }), fc.boolean())
  .map(([value, extra, asObject]) => {
    let wrapped = value
    for (let i = 0; i < extra; i++) wrapped = asObject ? { k: wrapped } : [wrapped]
    return wrapped
  })

describe('properties of the readers checks', () => {
  it('the byte scan finds the true nesting depth of every JSON text, however it is spaced', () => {
    fc.assert(
      fc.property(deepJson, fc.constantFrom(0, 1, 2, '\t'), (value, indent) => {
        const bytes = encode(JSON.stringify(value, null, indent))
        const depth = depthOf(value)
        expect(nestsDeeperThan(bytes, depth)).toBe(false)
        if (depth > 0) expect(nestsDeeperThan(bytes, depth - 1)).toBe(true)
      }),
      { numRuns },
    )
  })

  it('the walk over a parsed value finds the same depth as the byte scan', () => {
    fc.assert(
      fc.property(deepJson, fc.integer({ min: 1, max: 45 }), (value, max) => {
        const bytes = encode(JSON.stringify(value))
        const walked = measureValue(value, max, Number.MAX_SAFE_INTEGER)
        expect(walked === 'too-deep').toBe(nestsDeeperThan(bytes, max))
      }),
      { numRuns },
    )
  })

  it('no body the checks accept nests deeper than maxJsonDepth or fails to serialise, and no bytes make them throw', () => {
    const bytes = fc.oneof(
      deepJson.map((value) => encode(JSON.stringify({ model: 'm', x: value }))),
      fc.uint8Array({ maxLength: 64 }),
      fc
        .tuple(fc.nat({ max: 300 }), fc.constantFrom('[', '{"a":'), fc.boolean())
        .map(([n, open, close]) =>
          encode(
            `{"model":"m","x":${open.repeat(n)}1${close ? (open === '[' ? ']' : '}').repeat(n) : ''}}`,
          ),
        ),
    )
    fc.assert(
      fc.property(bytes, fc.integer({ min: 1, max: 64 }), (body, maxJsonDepth) => {
        const check = checkClientBody(body, openaiChat, { maxJsonDepth })
        if (!check.ok) return
        expect(depthOf(check.body)).toBeLessThanOrEqual(maxJsonDepth)
        // What an attempt does with it first: serialising, here under a deep stack of its own.
        const underDeepStack = (frames: number): string =>
          frames === 0 ? JSON.stringify(check.body) : underDeepStack(frames - 1)
        expect(() => underDeepStack(2_000)).not.toThrow()
        const parsed = checkParsedBody(check.body, openaiChat, {
          ...requestBodyDefaults,
          maxJsonDepth,
        })
        expect(parsed.check.ok).toBe(true)
      }),
      { numRuns },
    )
  })

  it('every value of requestBodyTimeoutMs either bounds the read as documented or is a RangeError', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.double(),
          fc.integer({ min: 2 ** 31 - 10, max: 2 ** 31 + 10 }),
          fc.constantFrom(Number.POSITIVE_INFINITY, -0, 0, 1, 2 ** 31 - 1, 2 ** 31),
        ),
        async (timeoutMs) => {
          const request = new Request('http://gateway/v1', {
            method: 'POST',
            body: '{"model":"m"}',
          })
          const valid =
            timeoutMs === Number.POSITIVE_INFINITY || (timeoutMs > 0 && timeoutMs <= 2 ** 31 - 1)
          const read = readClientRequest(request, {
            adapter: openaiChat,
            requestBodyTimeoutMs: timeoutMs,
          })
          if (!valid) return void (await expect(read).rejects.toThrow(RangeError))
          // A body that is there at once is read, whatever the bound: no timer fires early.
          expect((await read).ok).toBe(true)
        },
      ),
      { numRuns },
    )
  })
})
