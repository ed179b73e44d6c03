import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  byteSearch,
  includesBytes,
  indexOfByte,
  pickIndexOf,
  pickIndexOfBytes,
  scanIncludes,
} from '../../src/sse/index-of.js'
import { runs } from '../support/runs.js'

const bytesAndStart = fc.tuple(
  fc.uint8Array({ maxLength: 600 }),
  fc.nat({ max: 40 }),
  fc.nat({ max: 40 }),
  fc.constantFrom(10, 13, 34, 114, 0, 255),
  fc.nat({ max: 700 }),
)

/** A view of `bytes` that does not start at its buffer's start. */
function viewOf(bytes: Uint8Array, cutStart: number, cutEnd: number): Uint8Array {
  const start = Math.min(cutStart, bytes.length)
  return bytes.subarray(start, Math.max(start, bytes.length - cutEnd))
}

describe('indexOfByte (the byte search under the splitter and the adapters)', () => {
  it('finds what Uint8Array.prototype.indexOf finds, on views at any offset, from any start', () => {
    fc.assert(
      fc.property(bytesAndStart, ([bytes, cutStart, cutEnd, value, from]) => {
        const view = viewOf(bytes, cutStart, cutEnd)
        expect(indexOfByte(view, value, from)).toBe(view.indexOf(value, from))
        expect(indexOfByte(view, value)).toBe(view.indexOf(value))
      }),
      { numRuns: runs(500) },
    )
  })

  it("takes Buffer's search on Node, and the standard one where there is none or it answers wrong", () => {
    expect(byteSearch).toBe('buffer')
    const standard = Uint8Array.prototype.indexOf
    expect(pickIndexOf(undefined)).toBe(standard)
    expect(pickIndexOf(() => 0)).toBe(standard)
    expect(
      pickIndexOf(() => {
        throw new TypeError('not a Buffer')
      }),
    ).toBe(standard)
    const buffer = Buffer.prototype.indexOf
    expect(pickIndexOf(buffer)).toBe(buffer)
    // The fallback answers the same as the fast one.
    fc.assert(
      fc.property(bytesAndStart, ([bytes, cutStart, cutEnd, value, from]) => {
        const view = viewOf(bytes, cutStart, cutEnd)
        const fast = pickIndexOf(buffer)
        const slow = pickIndexOf(undefined)
        expect(fast.call(view, value, from)).toBe(slow.call(view, value, from))
      }),
      { numRuns: runs(200) },
    )
  })
})

/** Whether `needle` occurs in `bytes`, the obvious way. */
function naiveIncludes(bytes: Uint8Array, needle: Uint8Array): boolean {
  outer: for (let at = 0; at + needle.length <= bytes.length; at++) {
    for (let index = 0; index < needle.length; index++)
      if (bytes[at + index] !== needle[index]) continue outer
    return true
  }
  return false
}

describe('includesBytes (a request secret searched in a chunk before it is written)', () => {
  // Small alphabets, so that runs and near-misses of the needle are common.
  const byte = fc.constantFrom(115, 107, 45, 97, 92, 0, 255)
  const cases = fc.tuple(
    fc.array(byte, { maxLength: 400 }).map((a) => Uint8Array.from(a)),
    fc.array(byte, { minLength: 1, maxLength: 12 }).map((a) => Uint8Array.from(a)),
    fc.nat({ max: 30 }),
    fc.nat({ max: 30 }),
    fc.boolean(),
  )

  it('finds a run of bytes exactly when it occurs, on views at any offset, native and scanning alike', () => {
    fc.assert(
      fc.property(cases, ([bytes, needle, cutStart, cutEnd, plant]) => {
        let haystack = bytes
        if (plant) {
          const at = Math.min(cutStart, haystack.length)
          const joined = new Uint8Array(haystack.length + needle.length)
          joined.set(haystack.subarray(0, at))
          joined.set(needle, at)
          joined.set(haystack.subarray(at), at + needle.length)
          haystack = joined
        }
        const view = viewOf(haystack, cutStart % 5, cutEnd % 5)
        const expected = naiveIncludes(view, needle)
        expect(includesBytes(view, needle)).toBe(expected)
        expect(scanIncludes(view, needle)).toBe(expected)
      }),
      { numRuns: runs(500) },
    )
  })

  it("takes Buffer's run search on Node, and none where there is none or it answers wrong", () => {
    expect(pickIndexOfBytes(Buffer.prototype.indexOf)).toBe(Buffer.prototype.indexOf)
    expect(pickIndexOfBytes(undefined)).toBeUndefined()
    expect(pickIndexOfBytes(() => 0)).toBeUndefined()
    expect(pickIndexOfBytes(Uint8Array.prototype.indexOf)).toBeUndefined()
  })
})
