/**
 * `nodeResponse`'s light `Response` (no undici state per attempt) against the real one made
 * from the same raw header pairs: its headers read, iterate and change as `Headers` do, and
 * every reading the relay makes of an answer's headers (the forwarded allowlist, the key's
 * headroom, a rate limit's wait, a failure's verdict) is the same from both.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { forwardableHeaders } from '../../src/commit/headers.js'
import { classifyAttemptFailure } from '../../src/retry/decisions/classify.js'
import { parseHeadroom } from '../../src/retry/decisions/headroom.js'
import { rateLimitDelay } from '../../src/retry/decisions/rate-limit-headers.js'
import { PlainHeaders, PlainResponse } from '../../src/sse/plain-response.js'
import { frameSourceOf } from '../../src/sse/sources.js'
import { runs } from '../support/runs.js'

/** Names an upstream sends, in any case, with the ones the relay reads among them. */
const names = fc.constantFrom(
  'Content-Type',
  'content-type',
  'x-request-id',
  'X-Request-Id',
  'request-id',
  'retry-after',
  'Retry-After',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-tokens',
  'anthropic-ratelimit-requests-remaining',
  'anthropic-ratelimit-requests-reset',
  'anthropic-ratelimit-unified-status',
  'x-should-retry',
  'set-cookie',
  'Set-Cookie',
  'connection',
  'openai-organization',
  'openai-processing-ms',
  'x-other',
  'a',
  'zz-last',
)
const values = fc.oneof(
  fc.constantFrom(
    '0',
    '1',
    '20',
    '59',
    '1s',
    '6m0s',
    'true',
    'false',
    'keep-alive',
    'close, x-other',
  ),
  fc.constantFrom('text/event-stream', 'application/json', '2026-12-06T21:00:00Z'),
  fc.constantFrom(' padded ', '\tt', 'a=1; Path=/', 'sk-abcdefghijklmnopqrstuvwxyz0123456789'),
  fc.stringMatching(/^[ -~]{0,12}$/),
)
const rawPairs = fc.array(fc.tuple(names, values), { maxLength: 14 }).map((pairs) => pairs.flat())

function realOf(raw: readonly string[]): Headers {
  const headers = new Headers()
  for (let i = 0; i + 1 < raw.length; i += 2) headers.append(raw[i] as string, raw[i + 1] as string)
  return headers
}

const probes = [
  'content-type',
  'Content-Type',
  'x-request-id',
  'retry-after',
  'set-cookie',
  'x-ratelimit-remaining-requests',
  'connection',
  'missing',
]

describe("nodeResponse's light headers", () => {
  it('read, iterate and change as Headers made from the same raw pairs', () => {
    fc.assert(
      fc.property(rawPairs, (raw) => {
        const plain = new PlainHeaders(raw)
        const real = realOf(raw)
        expect(plain).toBeInstanceOf(Headers)
        expect([...plain]).toEqual([...real])
        expect([...plain.keys()]).toEqual([...real.keys()])
        expect([...plain.values()]).toEqual([...real.values()])
        expect(plain.getSetCookie()).toEqual(real.getSetCookie())
        const seen: [string, string][] = []
        plain.forEach((value, name) => {
          seen.push([name, value])
        })
        expect(seen).toEqual([...real])
        for (const name of probes) {
          expect(plain.get(name)).toBe(real.get(name))
          expect(plain.has(name)).toBe(real.has(name))
        }
        // Changed the same way, they still agree (a wrapper may fix a header before returning).
        for (const headers of [plain, real]) {
          headers.set('Content-Type', 'text/event-stream')
          headers.append('x-request-id', 'req_2')
          headers.delete('Retry-After')
          headers.append('set-cookie', 'c=3')
        }
        expect([...plain]).toEqual([...real])
        expect(new Headers(plain).get('x-request-id')).toBe(real.get('x-request-id'))
      }),
      { numRuns: runs(300) },
    )
  })

  it('give every reading the relay makes of an answer the same result as Headers', () => {
    const secrets = ['sk-abcdefghijklmnopqrstuvwxyz0123456789']
    const now = Date.parse('2026-12-06T20:59:00Z')
    fc.assert(
      fc.property(rawPairs, fc.constantFrom(200, 408, 429, 500, 503, 529), (raw, status) => {
        const plain = new PlainHeaders(raw)
        const real = realOf(raw)
        for (const policy of [undefined, { rateLimit: true }, 'none' as const]) {
          expect([...forwardableHeaders(plain, policy, secrets)]).toEqual([
            ...forwardableHeaders(real, policy, secrets),
          ])
        }
        expect(parseHeadroom(plain, now)).toEqual(parseHeadroom(real, now))
        expect(rateLimitDelay(plain, now)).toBe(rateLimitDelay(real, now))
        const verdict = (headers: Headers) =>
          classifyAttemptFailure({ kind: 'status', status, headers, error: undefined })
        expect(verdict(plain)).toEqual(verdict(real))
      }),
      { numRuns: runs(300) },
    )
  })

  it('refuse what Headers refuses, with a TypeError', () => {
    const plain = new PlainHeaders()
    expect(() => plain.set('bad name', 'v')).toThrow(TypeError)
    expect(() => new Headers().set('bad name', 'v')).toThrow(TypeError)
    expect(() => plain.append('x-a', 'line\r\nbreak')).toThrow(TypeError)
    expect(() => new Headers().append('x-a', 'line\r\nbreak')).toThrow(TypeError)
  })
})

describe("nodeResponse's light Response", () => {
  const bytes = new TextEncoder().encode('{"ok":true}')
  async function* body() {
    yield bytes
  }
  const make = (status = 200) =>
    new PlainResponse(status, 'OK', new PlainHeaders(['Content-Type', 'application/json']), body())

  it('is a Response whose members read as a real one', async () => {
    const response = make()
    expect(response).toBeInstanceOf(Response)
    expect(response.headers).toBeInstanceOf(Headers)
    expect([response.status, response.ok, response.statusText, response.type]).toEqual([
      200,
      true,
      'OK',
      'default',
    ])
    expect(await response.json()).toEqual({ ok: true })
    expect(response.bodyUsed).toBe(true)
    await expect(response.text()).rejects.toThrow(TypeError)
    expect(make(503).ok).toBe(false)
  })

  it('hands the frame reader its iterable body, or the web stream once cloned', async () => {
    const response = make()
    expect(frameSourceOf(response)).not.toBeInstanceOf(ReadableStream)
    const copy = response.clone()
    expect(frameSourceOf(response)).toBeInstanceOf(ReadableStream)
    expect(await copy.text()).toBe('{"ok":true}')
    expect(await response.text()).toBe('{"ok":true}')
  })

  it('as the init of a real Response, gives it the same status and headers', () => {
    const light = make()
    const real = new Response(null, light)
    expect(real.status).toBe(200)
    expect([...real.headers]).toEqual([...light.headers])
  })

  it('has no body for a null-body status, and refuses a status no Response has', () => {
    expect(make(204).body).toBeNull()
    expect(() => make(101)).toThrow(RangeError)
    expect(() => new Response(null, { status: 101 })).toThrow(RangeError)
  })
})
