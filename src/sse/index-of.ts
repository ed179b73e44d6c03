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

/** A search for a run of bytes with `Buffer.prototype.indexOf`'s contract. */
type IndexOfBytes = (this: Uint8Array, value: Uint8Array) => number

/**
 * `candidate` when it finds a run of bytes in a plain `Uint8Array` view as it should (Node's
 * and Bun's `Buffer.prototype.indexOf`, a native two-way search), else `undefined`.
 * @internal exported for tests
 */
export function pickIndexOfBytes(candidate: unknown): IndexOfBytes | undefined {
  if (typeof candidate !== 'function') return undefined
  try {
    const probe = new Uint8Array([9, 1, 2, 1, 2, 3]).subarray(1)
    const find = candidate as IndexOfBytes
    if (
      find.call(probe, new Uint8Array([1, 2, 3])) === 2 &&
      find.call(probe, new Uint8Array([2, 1])) === 1 &&
      find.call(probe, new Uint8Array([9, 1])) === -1 &&
      find.call(probe, new Uint8Array([3, 4])) === -1
    ) {
      return find
    }
  } catch {
    // Not usable on a plain Uint8Array here.
  }
  return undefined
}

const bytesSearch = pickIndexOfBytes(
  (globalThis as { Buffer?: { prototype?: { indexOf?: unknown } } }).Buffer?.prototype?.indexOf,
)

/**
 * Whether the run `needle` (not empty) occurs in `bytes`: the native search where the runtime
 * has one, else a scan from each occurrence of its first byte.
 */
export function includesBytes(bytes: Uint8Array, needle: Uint8Array): boolean {
  return bytesSearch === undefined
    ? scanIncludes(bytes, needle)
    : bytesSearch.call(bytes, needle) !== -1
}

/**
 * {@link includesBytes} without a native search.
 * @internal exported for tests
 */
export function scanIncludes(bytes: Uint8Array, needle: Uint8Array): boolean {
  const first = needle[0] as number
  const last = bytes.length - needle.length
  for (let at = indexOfByte(bytes, first); at !== -1 && at <= last; ) {
    let index = 1
    while (index < needle.length && bytes[at + index] === needle[index]) index++
    if (index === needle.length) return true
    at = indexOfByte(bytes, first, at + 1)
  }
  return false
}
