/**
 * fast-check arbitraries for SSE byte streams and their chunkings. The library's own
 * property tests and benchmarks use these; adapter authors can too.
 *
 * @module
 * @group Conformance
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

/**
 * Keys the shipped protocols' frames and messages carry: {@link wrongShapeObject} puts
 * values of the wrong type under them.
 */
const protocolKeys: readonly string[] = [
  'choices',
  'delta',
  'content',
  'text',
  'type',
  'index',
  'finish_reason',
  'error',
  'message',
  'code',
  'status',
  'candidates',
  'parts',
  'finishReason',
  'thought',
  'usage',
  'response',
  'output',
  'item',
  'part',
  'id',
  'model',
  'role',
  'tool_calls',
  'function',
  'arguments',
  'name',
  'content_block',
  'stop_reason',
  'refusal',
  'reasoning',
  'sequence_number',
]

/** A JSON value of a type no protocol field expects everywhere: `null`, numbers, `{}`, `[]`… */
function wrongValue(): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: fc.boolean() },
    { weight: 2, arbitrary: fc.oneof(fc.integer(), fc.constantFrom(0, -1, 5, 0.5, 1e308)) },
    { weight: 1, arbitrary: fc.string({ maxLength: 8 }) },
    // Parsed anew each time: no two inputs share an object an adapter might change.
    {
      weight: 2,
      arbitrary: fc
        .constantFrom('{}', '[]', '[null]', '[{}]', '{"":null}')
        .map((text): unknown => JSON.parse(text)),
    },
  )
}

/**
 * JSON objects with the protocols' usual keys holding wrong-typed values, one level or
 * nested (`{"choices":null}`, `{"delta":5}`, `{"content":{}}`, `{"choices":[{"delta":[]}]}`).
 */
export function wrongShapeObject(): fc.Arbitrary<Record<string, unknown>> {
  const key = fc.constantFrom(...protocolKeys)
  const flat = fc.dictionary(key, wrongValue(), { minKeys: 1, maxKeys: 4 })
  return fc.dictionary(
    key,
    fc.oneof(
      { weight: 3, arbitrary: wrongValue() },
      { weight: 1, arbitrary: flat },
      { weight: 1, arbitrary: fc.array(flat, { minLength: 1, maxLength: 2 }) },
    ),
    { minKeys: 1, maxKeys: 4 },
  )
}

/**
 * Frame data every adapter must read without throwing: one of each kind {@link frameData}
 * draws. `checkAdapter` runs each of these as a stream of its own before any random input.
 */
export const frameDataCorpus: readonly string[] = [
  'null',
  'true',
  'false',
  '0',
  '-1.5e308',
  '"text"',
  '""',
  '[]',
  '[null]',
  '[{"choices":[]}]',
  '{}',
  '{"choices":null}',
  '{"choices":[null]}',
  '{"choices":[{"delta":5}]}',
  '{"choices":[{"delta":{"content":{}}}]}',
  '{"choices":[{"delta":{"tool_calls":[null]}}]}',
  '{"type":"content_block_delta","delta":null}',
  '{"type":"error","error":null}',
  '{"type":"response.output_text.delta","delta":{}}',
  '{"candidates":[{"content":{"parts":[5]}}]}',
  '{"error":"overloaded"}',
  `${'['.repeat(64)}${']'.repeat(64)}`,
  `${'{"choices":'.repeat(64)}null${'}'.repeat(64)}`,
  'not json',
  '[DONE',
  '{"choices":',
  '',
  '{"choices":\n[]}',
  'null\nnull',
]

/** A top-level JSON scalar (`null` most often), as text. */
function jsonScalarText(): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 4, arbitrary: fc.constant('null') },
    { weight: 1, arbitrary: fc.constantFrom('true', 'false') },
    {
      weight: 2,
      arbitrary: fc.oneof(
        fc.integer().map(String),
        fc.double({ noNaN: true, noDefaultInfinity: true }).map((n) => JSON.stringify(n)),
        fc.constantFrom('0', '-0', '1e308', '1e999', '0.5'),
      ),
    },
    { weight: 2, arbitrary: fc.string({ maxLength: 12 }).map((text) => JSON.stringify(text)) },
  )
}

/** JSON nested 20 to 100 levels deep, through protocol keys and arrays. */
function deepJsonText(): fc.Arbitrary<string> {
  const level = fc.oneof(
    fc.constantFrom(...protocolKeys).map((key) => [`{"${key}":`, '}'] as const),
    fc.constant(['[', ']'] as const),
  )
  return fc.tuple(fc.array(level, { minLength: 20, maxLength: 100 }), wrongValue()).map(
    ([levels, leaf]) =>
      `${levels.map(([open]) => open).join('')}${JSON.stringify(leaf)}${levels
        .map(([, close]) => close)
        .reverse()
        .join('')}`,
  )
}

/** Text that is not JSON: words, cut JSON, an end marker without its bracket, HTML. */
function nonJsonText(): fc.Arbitrary<string> {
  return fc.oneof(
    lineText(),
    fc.constantFrom(
      'undefined',
      'NaN',
      '{',
      '}',
      '{"choices":',
      "{'a':1}",
      '{"a":1,}',
      '{"a":1}{"b":2}',
      '[DONE',
      'nul',
      '"unterminated',
      '<html><title>502 Bad Gateway</title></html>',
    ),
    fc.integer({ min: 20, max: 2_000 }).map((depth) => '['.repeat(depth)),
  )
}

/**
 * The `data` of a frame (lines joined with LF) that no protocol sends but every adapter must
 * read without throwing: JSON scalars (`null` most often), arrays, JSON nested 20–100 levels
 * deep, objects with protocol keys holding wrong-typed values ({@link wrongShapeObject}),
 * non-JSON text, empty data, multi-line data, and the {@link frameDataCorpus}.
 */
export function frameData(): fc.Arbitrary<string> {
  const line = fc.oneof(jsonScalarText(), lineText(), fc.constantFrom('{', '}', '[', ']', ','))
  return fc.oneof(
    { weight: 4, arbitrary: jsonScalarText() },
    {
      weight: 2,
      arbitrary: fc
        .array(fc.oneof(wrongValue(), wrongShapeObject()), { maxLength: 4 })
        .map((items) => JSON.stringify(items)),
    },
    { weight: 2, arbitrary: deepJsonText() },
    { weight: 4, arbitrary: wrongShapeObject().map((value) => JSON.stringify(value)) },
    { weight: 2, arbitrary: nonJsonText() },
    { weight: 1, arbitrary: fc.constant('') },
    {
      weight: 1,
      arbitrary: fc.array(line, { minLength: 2, maxLength: 4 }).map((l) => l.join('\n')),
    },
    { weight: 1, arbitrary: fc.constantFrom(...frameDataCorpus) },
  )
}

/** An SSE frame with `data` (one `data:` line per line of it) and, when given, an `event`. */
export function dataFrameText(data: string, event?: string): string {
  const lines = data
    .split('\n')
    .map((line) => `data: ${line}\n`)
    .join('')
  return `${event === undefined ? '' : `event: ${event}\n`}${lines}\n`
}

/** One change {@link mangledStream} makes to a stream; `at` picks the frame. */
type Mangle =
  | { readonly kind: 'insert'; readonly at: number; readonly event: number; readonly data: string }
  | { readonly kind: 'retype'; readonly at: number; readonly node: number; readonly value: unknown }
  | { readonly kind: 'truncate'; readonly at: number; readonly cut: number }

/** A whole frame of a stream being mangled: its bytes as they came, or fields to write anew. */
interface Piece {
  readonly raw?: Uint8Array
  readonly event: string | undefined
  readonly data: string | undefined
}

/** A frame of a stream being mangled: its bytes, and the fields the mangling reads. */
interface SplitFrame {
  readonly raw: Uint8Array
  readonly event: string | undefined
  readonly data: string | undefined
  /** `false` for a last frame the end of the stream cut before its blank line. */
  readonly terminated: boolean
}

const textDecoder = new TextDecoder()
// A CR LF pair is one line end: a lone CR only when no LF follows it.
const blankLine = /(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)/g

/** The fields of one frame's text (`event`, `data` lines joined), as SSE reads them. */
function fieldsOf(text: string): Pick<SplitFrame, 'event' | 'data'> {
  let event: string | undefined
  const data: string[] = []
  for (const line of text.split(/\r\n|\r|\n/)) {
    const colon = line.indexOf(':')
    const name = colon < 0 ? line : line.slice(0, colon)
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '')
    if (name === 'event') event = value
    else if (name === 'data') data.push(value)
  }
  return { event, data: data.length === 0 ? undefined : data.join('\n') }
}

/**
 * The frames of `bytes`, a last one cut by end of stream included (`terminated: false`): a
 * small synchronous split on blank lines, enough to mangle generated streams (the library's
 * own reader stays the one that judges them).
 */
function splitFrames(bytes: Uint8Array): SplitFrame[] {
  const text = textDecoder.decode(bytes)
  const frames: SplitFrame[] = []
  let start = 0
  for (const match of text.matchAll(blankLine)) {
    const end = (match.index ?? 0) + match[0].length
    const frameText = text.slice(start, end)
    frames.push({ raw: encoder.encode(frameText), ...fieldsOf(frameText), terminated: true })
    start = end
  }
  if (start < text.length) {
    const rest = text.slice(start)
    frames.push({ raw: encoder.encode(rest), ...fieldsOf(rest), terminated: false })
  }
  return frames
}

/** `value` (parsed JSON) with the `node`-th value below its root, counted depth first, replaced. */
function retype(value: object, node: number, replacement: unknown): object {
  const slots: [Record<string, unknown>, string][] = []
  const walk = (parent: unknown): void => {
    if (typeof parent !== 'object' || parent === null) return
    for (const key of Object.keys(parent)) {
      slots.push([parent as Record<string, unknown>, key])
      walk((parent as Record<string, unknown>)[key])
    }
  }
  walk(value)
  const slot = slots[node % Math.max(1, slots.length)]
  if (slot !== undefined) slot[0][slot[1]] = replacement
  else if (Array.isArray(value)) value.push(replacement)
  else
    (value as Record<string, unknown>)[protocolKeys[node % protocolKeys.length] ?? 'type'] =
      replacement
  return value
}

/** Applies one change to `pieces`; `events` are the event names the stream used. */
function applyMangle(pieces: Piece[], events: readonly string[], change: Mangle): void {
  if (change.kind === 'insert') {
    const pick = change.event % (events.length + 1)
    const event = pick === 0 ? undefined : events[pick - 1]
    pieces.splice(change.at % (pieces.length + 1), 0, { event, data: change.data })
    return
  }
  const index = change.at % Math.max(1, pieces.length)
  const target = pieces[index]
  if (target?.data === undefined) return
  const { event, data } = target
  if (change.kind === 'truncate') {
    pieces[index] = { event, data: data.slice(0, change.cut % (data.length + 1)) }
    return
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(data)
  } catch {
    return
  }
  if (typeof parsed !== 'object' || parsed === null) return
  pieces[index] = { event, data: JSON.stringify(retype(parsed, change.node, change.value)) }
}

/** `bytes` with `changes` made to its whole frames; a frame cut by end of stream stays last. */
function mangle(bytes: Uint8Array, changes: readonly Mangle[]): Uint8Array {
  const frames = splitFrames(bytes)
  const tail = frames.at(-1)?.terminated === false ? frames.pop() : undefined
  const pieces: Piece[] = frames.map(({ raw, event, data }) => ({ raw, event, data }))
  const events = [...new Set(frames.flatMap((frame) => frame.event ?? []))]
  for (const change of changes) applyMangle(pieces, events, change)
  const parts = pieces.map(
    (piece) => piece.raw ?? encoder.encode(dataFrameText(piece.data ?? '', piece.event)),
  )
  if (tail !== undefined) parts.push(tail.raw)
  return concatBytes(parts)
}

/** Options of {@link mangledStream}. */
export interface MangledStreamOptions {
  /**
   * Also cut a frame's data short (JSON missing its closing brackets).
   * @default true
   */
  cut?: boolean
}

/**
 * Streams of `streams` with frames no protocol sends mixed in among the well-formed ones:
 * frames of {@link frameData} inserted (under an event name the stream uses, or none), a
 * value inside a frame's JSON replaced by one of the wrong type (`choices: null`,
 * `delta: 5`, `content: {}` at the paths the protocol really uses), and data cut short.
 *
 * @example
 * fc.assert(fc.property(arbitraries.mangledStream(arbitraries.sseStream()), (bytes) => { … }))
 */
export function mangledStream(
  streams: fc.Arbitrary<Uint8Array>,
  options: MangledStreamOptions = {},
): fc.Arbitrary<Uint8Array> {
  // Unbiased: fast-check's bias towards small numbers would pick the first frames and keys.
  const pick = fc.noBias(fc.nat())
  const insert = fc
    .record({ at: pick, event: pick, data: frameData() })
    .map((c): Mangle => ({ kind: 'insert', ...c }))
  const retype = fc
    .record({ at: pick, node: pick, value: wrongValue() })
    .map((c): Mangle => ({ kind: 'retype', ...c }))
  const cut = fc.record({ at: pick, cut: pick }).map((c): Mangle => ({ kind: 'truncate', ...c }))
  const change = fc.oneof(
    { weight: 3, arbitrary: insert },
    { weight: 4, arbitrary: retype },
    ...((options.cut ?? true) ? [{ weight: 1, arbitrary: cut }] : []),
  )
  return fc
    .tuple(streams, fc.noBias(fc.array(change, { minLength: 1, maxLength: 8 })))
    .map(([bytes, changes]) => mangle(bytes, changes))
}

/**
 * JSON objects a renderer of whole messages (`renderFromMessage`) must survive: objects with
 * protocol keys holding wrong-typed values, objects of the frames of `streams` with one
 * value replaced by one of the wrong type, and random objects.
 */
export function wrongShapeMessage(
  streams: fc.Arbitrary<Uint8Array>,
): fc.Arbitrary<Record<string, unknown>> {
  const fromStreams = fc
    .record({ bytes: streams, pick: fc.nat(), node: fc.nat(), value: wrongValue() })
    .map(({ bytes, pick, node, value }) => {
      const objects: object[] = []
      for (const frame of splitFrames(bytes)) {
        try {
          const parsed: unknown = JSON.parse(frame.data ?? '')
          if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
            objects.push(parsed)
        } catch {
          // Not JSON: no message to take.
        }
      }
      return retype(objects[pick % Math.max(1, objects.length)] ?? {}, node, value) as Record<
        string,
        unknown
      >
    })
  return fc.oneof(wrongShapeObject(), fromStreams, fc.object({ maxDepth: 3 }))
}
