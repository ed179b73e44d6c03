/**
 * How deep a client's JSON nests, found without recursion: serialising a body is recursive (on
 * Node 20 `JSON.stringify` overflows the stack at about 4,000 levels, fewer on a deeper stack),
 * so a reader refuses a body past its bound before anything recursive sees it. One pass over
 * the bytes before the parse; an explicit stack over a value a framework already parsed.
 *
 * @module
 */

import { indexOfByte } from '../../sse/index-of.js'

const quote = 0x22
const backslash = 0x5c
const openBrace = 0x7b
const openBracket = 0x5b
const closeBrace = 0x7d
const closeBracket = 0x5d

/**
 * Whether the JSON text in `bytes` nests deeper than `max` (the top-level object or array is
 * level 1). Exact for valid JSON: brackets inside strings are text (a string is skipped whole,
 * to its first quote not escaped; UTF-8 continuation bytes are never ASCII), so only structure
 * counts. For text that is not JSON the answer does not matter: the parse refuses it either
 * way. No allocation, one pass, stops at the first level past `max`.
 */
export function nestsDeeperThan(bytes: Uint8Array, max: number): boolean {
  let depth = 0
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i]
    if (byte === quote) {
      i = stringEnd(bytes, i)
      if (i === -1) return false
    } else if (byte === openBrace || byte === openBracket) {
      if (++depth > max) return true
    } else if (byte === closeBrace || byte === closeBracket) depth--
  }
  return false
}

/**
 * The index of the quote that closes the string opened at `open`, or -1. Strings are most of a
 * request's bytes: a native byte search crosses them (docs/performance.md), and a quote is
 * escaped when an odd run of backslashes precedes it (each backslash is counted once: a run
 * precedes one quote).
 */
function stringEnd(bytes: Uint8Array, open: number): number {
  for (let end = indexOfByte(bytes, quote, open + 1); end !== -1; ) {
    let backslashes = 0
    while (bytes[end - 1 - backslashes] === backslash) backslashes++
    if (backslashes % 2 === 0) return end
    end = indexOfByte(bytes, quote, end + 1)
  }
  return -1
}

/** What {@link measureValue} found of a parsed value. */
export type ValueMeasure = 'ok' | 'too-deep' | 'too-large'

/**
 * Whether a parsed value (a body a framework parsed) nests deeper than `maxDepth`, or holds
 * more than `maxValues` values (each one takes at least a byte when serialised, so a body with
 * more values than the byte bound allows is too large for it). An explicit stack, no
 * recursion; a cycle (code, not JSON, can make one) is too deep, and shared references (each
 * counted again, as serialising would write them again) run into the value bound: every value
 * ends in `maxValues` steps at most.
 */
export function measureValue(root: unknown, maxDepth: number, maxValues: number): ValueMeasure {
  const pending: [unknown, number][] = [[root, 1]]
  let values = 0
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [value, depth] = next
    if (++values > maxValues) return 'too-large'
    if (typeof value !== 'object' || value === null) continue
    if (depth > maxDepth) return 'too-deep'
    const members = Array.isArray(value) ? value : Object.values(value)
    for (const member of members) pending.push([member, depth + 1])
  }
  return 'ok'
}
