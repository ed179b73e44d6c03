/**
 * Frames with odd data for the conformance properties: the corpus of data no adapter should
 * throw on (JSON scalars, arrays, deep nesting, non-JSON), objects with the protocols' keys
 * holding wrong-typed values, and streams mangled from the host's own.
 *
 * @module
 */

import fc from 'fast-check'
import { concatBytes, lineText } from './streams.js'

const encoder = new TextEncoder()

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
