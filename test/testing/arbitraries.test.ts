import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { arbitraries } from '../../src/testing/index.js'

const decoder = new TextDecoder()
const encoder = new TextEncoder()

function parse(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(text) }
  } catch {
    return { ok: false }
  }
}

function depth(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0
  return 1 + Math.max(0, ...Object.values(value).map(depth))
}

describe('frameData', () => {
  const values = fc.sample(arbitraries.frameData(), { numRuns: 3_000, seed: 9 })
  const json = values.flatMap((text) => {
    const parsed = parse(text)
    return parsed.ok ? [parsed.value] : []
  })

  it.each([
    ['null', () => values.includes('null')],
    ['a number', () => json.some((v) => typeof v === 'number')],
    ['a JSON string', () => json.some((v) => typeof v === 'string')],
    ['a boolean', () => json.some((v) => typeof v === 'boolean')],
    ['an array', () => json.some(Array.isArray)],
    ['JSON nested at least 20 levels deep', () => json.some((v) => depth(v) >= 20)],
    [
      'choices, delta or content holding null, a number or {}',
      () =>
        json.some(
          (v) =>
            typeof v === 'object' &&
            v !== null &&
            ['choices', 'delta', 'content'].some((key) => {
              const inner = (v as Record<string, unknown>)[key]
              return (
                inner === null ||
                typeof inner === 'number' ||
                (typeof inner === 'object' && Object.keys(inner).length === 0)
              )
            }),
        ),
    ],
    ['text that is not JSON', () => values.some((text) => text !== '' && !parse(text).ok)],
    ['empty data', () => values.includes('')],
    ['multi-line data', () => values.some((text) => text.includes('\n'))],
  ] as const)('draws %s', (_kind, found) => {
    expect(found()).toBe(true)
  })

  it('never holds a CR, which would end a line inside the data', () => {
    expect(values.filter((text) => text.includes('\r'))).toEqual([])
  })
})

describe('mangledStream', () => {
  it('keeps a frame cut by end of stream last, whole', () => {
    const stream = encoder.encode(
      'event: a\ndata: {"t":"x"}\n\nevent: b\ndata: {"t":"y"}\n\ndata: {"cut',
    )
    fc.assert(
      fc.property(arbitraries.mangledStream(fc.constant(stream)), (bytes) => {
        expect(decoder.decode(bytes).endsWith('\n\ndata: {"cut')).toBe(true)
      }),
    )
  })

  it('names only events the stream uses', () => {
    const stream = encoder.encode('event: a\ndata: {"t":"x"}\n\nevent: b\ndata: {"t":[1]}\n\n')
    fc.assert(
      fc.property(arbitraries.mangledStream(fc.constant(stream)), (bytes) => {
        const events = [...decoder.decode(bytes).matchAll(/^event: (.*)$/gm)].map((m) => m[1])
        expect(events.filter((event) => event !== 'a' && event !== 'b')).toEqual([])
      }),
    )
  })

  it('puts a wrong-typed value inside the frames it was given', () => {
    const stream = encoder.encode('data: {"choices":[{"delta":{"content":"hi"}}]}\n\n')
    const changed = fc
      .sample(arbitraries.mangledStream(fc.constant(stream), { cut: false }), {
        numRuns: 500,
        seed: 4,
      })
      .map((bytes) => decoder.decode(bytes))
    expect(changed).toContain('data: {"choices":null}\n\n')
    expect(changed.some((text) => text.includes('"content":null'))).toBe(true)
  })
})
