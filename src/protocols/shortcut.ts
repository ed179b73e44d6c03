/**
 * What a shortcut that reads a frame without parsing it (the tracker's after commit, on an
 * adapter's `quickOutput`) must never skip, told from the frame's bytes: a usage report, an
 * error or a finish. The adapter's check says "an output delta"; these keys with a value
 * other than `null` say the full reading may find more in it (OpenRouter's usage on a chunk
 * whose `finish_reason` is null, an `error` on a Responses delta, which its SDK raises on, a
 * second choice finishing beside a first that goes on).
 *
 * @module
 */

import { indexOfByte } from '../sse/index-of.js'

const encoder = new TextEncoder()

/** JSON keys (quotes included) found by searching for one byte they share. */
interface Keys {
  readonly byte: number
  readonly keys: readonly { readonly bytes: Uint8Array; readonly at: number }[]
}

function keys(anchor: string, ...names: string[]): Keys {
  return {
    byte: anchor.charCodeAt(0),
    keys: names.map((name) => ({
      bytes: encoder.encode(`"${name}"`),
      at: name.indexOf(anchor) + 1,
    })),
  }
}

/**
 * Every shipped protocol's usage keys (Groq's `x_groq.usage` included), its error key and its
 * finish keys, grouped by a byte that is rare in a frame of output: one search per group.
 */
const reportKeys: readonly Keys[] = [
  keys('g', 'usage', 'usageMetadata'),
  keys('r', 'error', 'finish_reason'),
  keys('R', 'finishReason'),
]

const space = (byte: number | undefined) => byte === 32 || byte === 9 || byte === 10 || byte === 13

/** Whether `raw` holds `bytes` at `start`, then a colon and a value that is not `null`. */
function reportedAt(raw: Uint8Array, bytes: Uint8Array, start: number): boolean {
  if (start < 0) return false
  for (let i = 0; i < bytes.length; i++) if (raw[start + i] !== bytes[i]) return false
  let at = start + bytes.length
  while (space(raw[at])) at++
  if (raw[at] !== 58) return false
  at++
  while (space(raw[at])) at++
  return at < raw.length && raw[at] !== 110
}

/**
 * Whether a frame's bytes may hold a usage report, an error or a finish (one of the keys with
 * a value other than `null`): cheap, and `true` whenever unsure (a text that quotes such a
 * key costs a full reading, never a lost report).
 */
export function mayReportMore(raw: Uint8Array): boolean {
  for (const { byte, keys } of reportKeys) {
    for (let at = indexOfByte(raw, byte); at !== -1; at = indexOfByte(raw, byte, at + 1)) {
      for (const { bytes, at: offset } of keys) if (reportedAt(raw, bytes, at - offset)) return true
    }
  }
  return false
}
