/**
 * fast-check arbitraries for SSE: lines, frames and whole streams (every line ending, BOM,
 * comments, invalid UTF-8), their chunkings at tricky split points, and streams of each
 * shipped protocol with the EOF class they state. The `arbitraries` namespace
 * (`arbitraries.ts`) adds odd frame data and mangled streams (`mangle.ts`).
 *
 * @module
 */

import fc from 'fast-check'
import type { StreamAdapter } from '../protocols/types.js'
import { wireFor } from './wire.js'

const encoder = new TextEncoder()

/** Line endings the SSE specification allows. */
export type LineEnding = '\n' | '\r' | '\r\n'

/** Options of {@link sseStream}. */
export interface SseStreamOptions {
  /**
   * Allow bytes that are not valid UTF-8 inside field values.
   * @default true
   */
  invalidUtf8?: boolean
  /**
   * Allow a trailing frame with no blank line (cut by end of stream).
   * @default true
   */
  unterminatedTail?: boolean
  /**
   * Allow `retry:` lines. At most one per frame is generated, so a frame's `retry` is
   * unambiguous.
   * @default true
   */
  retry?: boolean
  /**
   * Largest number of frames.
   * @default 12
   */
  maxFrames?: number
}

/** Text without CR or LF: ASCII, colons and spaces, multibyte characters and emoji. */
export function lineText(): fc.Arbitrary<string> {
  const piece = fc.oneof(
    { weight: 6, arbitrary: fc.string({ unit: 'grapheme-ascii', maxLength: 12 }) },
    { weight: 2, arbitrary: fc.constantFrom(':', ' ', ': ', '  ', 'data:', '{"a":1}', '\0') },
    {
      weight: 3,
      arbitrary: fc.constantFrom('é', 'ß', '中文', '€', '😀', '👩‍👩‍👧', 'Ω≈ç', '\uFEFF'),
    },
  )
  return fc.array(piece, { maxLength: 5 }).map((pieces) => pieces.join('').replace(/[\r\n]/g, ''))
}

const invalidSequences: readonly number[][] = [
  [0xff],
  [0xc3],
  [0xe2, 0x82],
  [0xf0, 0x9f, 0x98],
  [0x80],
  [0xed, 0xa0, 0x80],
]

/** One line's bytes (without its ending), possibly with invalid UTF-8 mixed into the value. */
function lineBytes(invalidUtf8: boolean): fc.Arbitrary<Uint8Array> {
  const field = fc.oneof(
    { weight: 6, arbitrary: lineText().map((text) => `data: ${text}`) },
    { weight: 1, arbitrary: lineText().map((text) => `data:${text}`) },
    { weight: 1, arbitrary: fc.constant('data') },
    { weight: 2, arbitrary: lineText().map((text) => `event: ${text}`) },
    { weight: 1, arbitrary: fc.constant('event:') },
    { weight: 1, arbitrary: lineText().map((text) => `id: ${text}`) },
    { weight: 2, arbitrary: lineText().map((text) => `:${text}`) },
    { weight: 1, arbitrary: lineText().map((text) => `x-unknown: ${text}`) },
    { weight: 1, arbitrary: lineText().map((text) => text.replace(/:/g, '')) },
    // A BOM inside the stream, as itself or turned to mojibake (its bytes read as Latin-1,
    // the characters eventsource-parser strips at the start of a stream only).
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.constantFrom('\uFEFF', '\u00EF\u00BB\u00BF'), lineText())
        .map(([bom, text]) => `${bom}data: ${text}`),
    },
  )
  const bytes = field.map((line) => encoder.encode(line))
  if (!invalidUtf8) return bytes
  return fc
    .tuple(bytes, fc.option(fc.constantFrom(...invalidSequences), { freq: 5 }))
    .map(([line, bad]) => {
      if (bad === null) return line
      return concatBytes([line, Uint8Array.from(bad)])
    })
}

/** Concatenates byte arrays. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let length = 0
  for (const part of parts) length += part.length
  const out = new Uint8Array(length)
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.length
  }
  return out
}

/** A line ending: LF, CR or CRLF. */
export function lineEnding(): fc.Arbitrary<LineEnding> {
  return fc.constantFrom<LineEnding>('\n', '\r', '\r\n')
}

/**
 * One SSE frame: field and comment lines with mixed line endings, then a blank line. Lines
 * hold multibyte text, colons, NULs and, when allowed, invalid UTF-8.
 */
export function sseFrame(options: SseStreamOptions = {}): fc.Arbitrary<Uint8Array> {
  const invalidUtf8 = options.invalidUtf8 ?? true
  const retry = options.retry ?? true
  const line = fc.tuple(lineBytes(invalidUtf8), lineEnding())
  const retryValue = fc.oneof(fc.nat({ max: 99_999 }).map(String), lineText())
  const retryLine = retry
    ? fc.option(fc.tuple(retryValue, lineEnding()), { freq: 4 })
    : fc.constant(null)
  return fc
    .tuple(fc.array(line, { maxLength: 5 }), retryLine, fc.nat(), lineEnding())
    .map(([lines, retryPart, at, blank]) => {
      const parts: Uint8Array[] = []
      for (const [bytes, ending] of lines) parts.push(bytes, encoder.encode(ending))
      if (retryPart !== null) {
        const [value, ending] = retryPart
        parts.splice(2 * (at % (lines.length + 1)), 0, encoder.encode(`retry: ${value}${ending}`))
      }
      // A blank LF right after a line's CR would join it into one CRLF and merge two frames.
      const last = parts.at(-1)
      const joined = blank === '\n' && last !== undefined && last.at(-1) === 13
      parts.push(encoder.encode(joined ? '\r\n' : blank))
      return concatBytes(parts)
    })
}

/**
 * A whole SSE byte stream: an optional BOM, frames, and optionally a tail cut before its
 * blank line. Covers LF/CR/CRLF, comments, multi-line data, `id`, `retry`, multibyte text
 * and invalid UTF-8.
 */
export function sseStream(options: SseStreamOptions = {}): fc.Arbitrary<Uint8Array> {
  const unterminatedTail = options.unterminatedTail ?? true
  const tail = unterminatedTail
    ? fc.option(
        fc.tuple(lineBytes(options.invalidUtf8 ?? true), fc.constantFrom('', '\n', '\r', '\r\n')),
        { freq: 3 },
      )
    : fc.constant(null)
  return fc
    .tuple(fc.boolean(), fc.array(sseFrame(options), { maxLength: options.maxFrames ?? 12 }), tail)
    .map(([bom, frames, tailPart]) => {
      const parts: Uint8Array[] = []
      if (bom) parts.push(Uint8Array.of(0xef, 0xbb, 0xbf))
      parts.push(...frames)
      if (tailPart !== null) parts.push(tailPart[0], encoder.encode(tailPart[1]))
      return concatBytes(parts)
    })
}

/** Positions inside `bytes` where a split is most likely to break a naive parser. */
function trickySplitPoints(bytes: Uint8Array): number[] {
  const points: number[] = []
  for (let i = 1; i < bytes.length; i++) {
    const previous = bytes[i - 1] as number
    const current = bytes[i] as number
    // After a CR (inside a CRLF), and before a UTF-8 continuation byte (inside a character).
    if (previous === 13 || (current & 0xc0) === 0x80) points.push(i)
  }
  return points
}

/** Splits `bytes` at the given sorted, unique positions. */
export function splitAt(bytes: Uint8Array, points: readonly number[]): Uint8Array[] {
  const chunks: Uint8Array[] = []
  let start = 0
  for (const point of points) {
    if (point <= start || point >= bytes.length) continue
    chunks.push(bytes.subarray(start, point))
    start = point
  }
  if (start < bytes.length || chunks.length === 0) chunks.push(bytes.subarray(start))
  return chunks
}

/**
 * Chunkings of a byte array: whole, one byte at a time, random split points, and splits at
 * every tricky place (inside CRLF, inside a multibyte character). Chunks are copies, so a
 * consumer that keeps views of them is tested honestly.
 */
export function chunkings(bytes: Uint8Array): fc.Arbitrary<Uint8Array[]> {
  const length = bytes.length
  const copy = (chunks: Uint8Array[]) => chunks.map((chunk) => chunk.slice())
  const random =
    length < 2
      ? fc.constant<number[]>([])
      : fc.uniqueArray(fc.integer({ min: 1, max: length - 1 }), { maxLength: Math.min(length, 24) })
  const tricky = trickySplitPoints(bytes)
  return fc
    .oneof(
      { weight: 1, arbitrary: fc.constant<number[]>([]) },
      { weight: 1, arbitrary: fc.constant(Array.from({ length }, (_, i) => i)) },
      { weight: 4, arbitrary: random },
      {
        weight: 2,
        arbitrary:
          tricky.length === 0
            ? random
            : fc
                .subarray(tricky, { minLength: 1 })
                .chain((picked) => random.map((extra) => [...picked, ...extra])),
      },
    )
    .map((points) =>
      copy(
        splitAt(
          bytes,
          [...new Set(points)].sort((a, b) => a - b),
        ),
      ),
    )
}

/** A byte stream together with one of its chunkings. */
export function chunkedSseStream(
  options: SseStreamOptions = {},
): fc.Arbitrary<{ bytes: Uint8Array; chunks: Uint8Array[] }> {
  return sseStream(options).chain((bytes) => chunkings(bytes).map((chunks) => ({ bytes, chunks })))
}

/** What a generated protocol stream is meant to show. */
export type ProtocolScenario =
  | 'normal'
  | 'tool-call'
  | 'reasoning'
  | 'empty'
  | 'partial'
  | 'thinking-only'
  | 'error-frame'
  | 'keepalives-only'
  | 'role-only-then-stall'

/** Every {@link ProtocolScenario}. */
export const protocolScenarios: readonly ProtocolScenario[] = [
  'normal',
  'tool-call',
  'reasoning',
  'empty',
  'partial',
  'thinking-only',
  'error-frame',
  'keepalives-only',
  'role-only-then-stall',
]

/** A complete stream of a shipped protocol, with the EOF class it must be classified as. */
export interface ProtocolStream {
  readonly bytes: Uint8Array
  readonly scenario: ProtocolScenario
  readonly eof: 'completed' | 'partial' | 'thinking-only' | 'error-only' | 'empty'
}

const expectedEof: Record<ProtocolScenario, ProtocolStream['eof']> = {
  normal: 'completed',
  'tool-call': 'completed',
  reasoning: 'completed',
  empty: 'empty',
  partial: 'partial',
  'thinking-only': 'thinking-only',
  'error-frame': 'error-only',
  'keepalives-only': 'empty',
  'role-only-then-stall': 'empty',
}

/**
 * Complete streams of a shipped protocol (`openaiChat`, `openaiResponses`,
 * `anthropicMessages`, `geminiGenerateContent`) for a scenario (any when omitted): random
 * text, reasoning and tool-argument deltas with keep-alives in between.
 *
 * @throws {TypeError} for any other adapter (see {@link wireFor}).
 *
 * @example
 * fc.assert(fc.asyncProperty(arbitraries.protocolStream(openaiChat, 'partial'), async ({ bytes, eof }) => { … }))
 */
export function protocolStream(
  adapter: StreamAdapter,
  scenario?: ProtocolScenario,
): fc.Arbitrary<ProtocolStream> {
  // Fails here, at the call, for an adapter with no writer: not later, inside a property run.
  wireFor(adapter)
  const delta = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 16 })
  return fc
    .record({
      scenario:
        scenario === undefined ? fc.constantFrom(...protocolScenarios) : fc.constant(scenario),
      texts: fc.array(delta, { minLength: 1, maxLength: 8 }),
      thoughts: fc.array(delta, { minLength: 1, maxLength: 5 }),
      tool: fc.tuple(
        fc.stringMatching(/^[a-z_]{1,12}$/),
        fc.array(delta, { minLength: 1, maxLength: 4 }),
      ),
      keepalives: fc.array(fc.nat(), { maxLength: 4 }),
    })
    .map(({ scenario: kind, texts, thoughts, tool, keepalives }) => {
      const wire = wireFor(adapter)
      const text = () => texts.flatMap((t) => wire.text(t))
      let frames: string[]
      switch (kind) {
        case 'normal':
          frames = [...wire.start(), ...text(), ...wire.finish('stop')]
          break
        case 'tool-call':
          frames = [...wire.start(), ...wire.tool(tool[0], tool[1]), ...wire.finish('tool_use')]
          break
        case 'reasoning':
          frames = [
            ...wire.start(),
            ...thoughts.flatMap((t) => wire.reasoning(t)),
            ...text(),
            ...wire.finish('stop'),
          ]
          break
        case 'empty':
          frames = []
          break
        case 'partial':
          frames = [...wire.start(), ...text()]
          break
        case 'thinking-only':
          frames = [...wire.start(), ...thoughts.flatMap((t) => wire.reasoning(t))]
          break
        case 'error-frame':
          frames = [...wire.start(), wire.error(true, 'overloaded')]
          break
        case 'keepalives-only':
          frames = [wire.keepalive(), wire.keepalive()]
          break
        case 'role-only-then-stall':
          frames = wire.start()
          break
      }
      if (kind !== 'empty') {
        for (const at of keepalives) frames.splice(at % (frames.length + 1), 0, wire.keepalive())
      }
      return { bytes: encoder.encode(frames.join('')), scenario: kind, eof: expectedEof[kind] }
    })
}
