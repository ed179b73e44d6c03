/**
 * The byte search under the frame splitter and the adapters' byte checks. On V8,
 * `Uint8Array.prototype.indexOf` compares element by element; Node's `Buffer.prototype.indexOf`
 * takes any `Uint8Array` and searches with `memchr`, several times faster on a frame
 * (docs/performance.md, "Why the code is shaped this way"). It is used where it exists and answers a probe correctly
 * (Node, Bun); elsewhere (Workers, Deno without Node globals) the standard method is.
 *
 * @module
 */

/** A byte search with `Uint8Array.prototype.indexOf`'s contract. */
type IndexOf = (this: Uint8Array, value: number, from?: number) => number

const standard = Uint8Array.prototype.indexOf as IndexOf

/**
 * `candidate` when it is a function that answers a probe as the standard search does.
 * @internal exported for tests
 */
export function pickIndexOf(candidate: unknown): IndexOf {
  if (typeof candidate !== 'function') return standard
  try {
    const probe = new Uint8Array([1, 10, 2, 10, 3]).subarray(1)
    const search = candidate as IndexOf
    if (
      search.call(probe, 10) === 0 &&
      search.call(probe, 10, 1) === 2 &&
      search.call(probe, 3, 0) === 3 &&
      search.call(probe, 13, 0) === -1 &&
      search.call(probe, 10, 9) === -1
    ) {
      return search
    }
  } catch {
    // Not usable on a plain Uint8Array here.
  }
  return standard
}

const search = pickIndexOf(
  (globalThis as { Buffer?: { prototype?: { indexOf?: unknown } } }).Buffer?.prototype?.indexOf,
)

/**
 * Which search this runtime got.
 * @internal exported for tests
 */
export const byteSearch: 'buffer' | 'standard' = search === standard ? 'standard' : 'buffer'

/** The first index of `value` in `bytes` at or after `from` (≥ 0), or -1. */
export function indexOfByte(bytes: Uint8Array, value: number, from = 0): number {
  return search.call(bytes, value, from)
}
