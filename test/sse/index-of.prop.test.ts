import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { byteSearch, indexOfByte, pickIndexOf } from '../../src/sse/index-of.js'
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
