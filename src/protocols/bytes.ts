/**
 * Cheap checks on a frame's raw bytes, so adapters can decide without decoding or parsing.
 * Needles are ASCII; a JSON key with its quotes cannot appear inside a JSON string (quotes
 * there are escaped), so these checks do not mistake text for structure.
 *
 * @module
 */

import { indexOfByte } from '../sse/index-of.js'

const encoder = new TextEncoder()

/** An ASCII needle, with the position of its rarest byte to anchor the search on. */
export interface Needle {
  readonly bytes: Uint8Array
  readonly anchor: number
}

/** Prepares an ASCII needle; `anchor` is the index of a byte that is rare in the haystack. */
export function needle(text: string, anchor = 0): Needle {
  return { bytes: encoder.encode(text), anchor }
}

/** Whether `raw` starts with the needle. */
export function startsWith(raw: Uint8Array, { bytes }: Needle): boolean {
  if (raw.length < bytes.length) return false
  for (let i = 0; i < bytes.length; i++) if (raw[i] !== bytes[i]) return false
  return true
}

/** Whether `raw` contains the needle. */
export function includes(raw: Uint8Array, { bytes, anchor }: Needle): boolean {
  const key = bytes[anchor] as number
  const last = raw.length - bytes.length + anchor
  for (
    let at = indexOfByte(raw, key, anchor);
    at !== -1 && at <= last;
    at = indexOfByte(raw, key, at + 1)
  ) {
    const start = at - anchor
    let i = 0
    while (i < bytes.length && raw[start + i] === bytes[i]) i++
    if (i === bytes.length) return true
  }
  return false
}

/** Needles that share one anchor byte, looked for together in one pass (see {@link findNeedles}). */
export interface NeedleSet {
  readonly key: number
  /** Each needle's bytes, and where in it the anchor byte stands. */
  readonly needles: readonly { readonly bytes: Uint8Array; readonly at: number }[]
}

/** Prepares ASCII needles (at most 31) anchored on their first `anchor` byte, which each must hold. */
export function needleSet(anchor: string, ...texts: string[]): NeedleSet {
  const key = anchor.charCodeAt(0)
  const needles = texts.map((text) => {
    const at = text.indexOf(anchor)
    if (at === -1) throw new RangeError(`needle ${text} lacks its anchor ${anchor}`)
    return { bytes: encoder.encode(text), at }
  })
  return { key, needles }
}

/**
 * Which needles of `set` `raw` contains, as a bit mask (bit `i` for needle `i`): one pass
 * over the anchor byte's occurrences, instead of one pass per needle.
 */
export function findNeedles(raw: Uint8Array, { key, needles }: NeedleSet): number {
  let found = 0
  for (let at = indexOfByte(raw, key); at !== -1; at = indexOfByte(raw, key, at + 1)) {
    for (let n = 0; n < needles.length; n++) {
      const { bytes, at: offset } = needles[n] as { bytes: Uint8Array; at: number }
      const start = at - offset
      if (start < 0 || start + bytes.length > raw.length) continue
      let i = 0
      while (i < bytes.length && raw[start + i] === bytes[i]) i++
      if (i === bytes.length) found |= 1 << n
    }
  }
  return found
}

/** Whether the frame's last non-line-break byte closes a JSON object (`}`). */
export function endsWithObject(raw: Uint8Array): boolean {
  let end = raw.length - 1
  while (end >= 0 && (raw[end] === 10 || raw[end] === 13)) end--
  return raw[end] === 0x7d
}

/** Byte arrays joined into one; a lone array is returned as it is. */
export function joinBytes(chunks: readonly Uint8Array[]): Uint8Array {
  if (chunks.length === 1) return chunks[0] as Uint8Array
  const out = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.length, 0))
  let offset = 0
  for (const chunk of chunks) {
    out.set(chunk, offset)
    offset += chunk.length
  }
  return out
}
