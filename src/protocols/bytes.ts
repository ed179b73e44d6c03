/**
 * Cheap checks on a frame's raw bytes, so adapters can decide without decoding or parsing.
 * Needles are ASCII; a JSON key with its quotes cannot appear inside a JSON string (quotes
 * there are escaped), so these checks do not mistake text for structure.
 *
 * @module
 */

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
  for (let at = raw.indexOf(key, anchor); at !== -1 && at <= last; at = raw.indexOf(key, at + 1)) {
    const start = at - anchor
    let i = 0
    while (i < bytes.length && raw[start + i] === bytes[i]) i++
    if (i === bytes.length) return true
  }
  return false
}

/** Whether the frame's last non-line-break byte closes a JSON object (`}`). */
export function endsWithObject(raw: Uint8Array): boolean {
  let end = raw.length - 1
  while (end >= 0 && (raw[end] === 10 || raw[end] === 13)) end--
  return raw[end] === 0x7d
}
