/**
 * `checkAdapter()`: the conformance properties every `StreamAdapter` must hold, run with
 * fast-check against the adapter author's own stream generator and against frames no
 * protocol sends. The first counterexample is reported in plain words.
 *
 * @module
 */

import fc from 'fast-check'
import { classifyEof, createStreamTracker, type StreamTracker } from '../classify/index.js'
import { isUserCodeError, UserCodeError } from '../errors.js'
import { adapterReturns, guardMethods } from '../guard-methods.js'
import { didYouMean, positiveInteger } from '../options.js'
import { sanitizeMessage } from '../protocols/sanitize.js'
import type {
  FrameVerdict,
  RenderableError,
  RenderState,
  StreamAdapter,
} from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import { createFrameReader } from '../sse/reader.js'
import {
  chunkings,
  concatBytes,
  dataFrameText,
  frameData,
  frameDataCorpus,
  mangledStream,
  sseStream,
  wrongShapeMessage,
} from './arbitraries.js'

/**
 * A stream for the harness: bytes, optionally with the EOF class it must end as.
 *
 * @group Conformance
 */
export type StreamSample =
  | Uint8Array
  | {
      readonly bytes: Uint8Array
      readonly eof?: 'completed' | 'partial' | 'thinking-only' | 'error-only' | 'empty'
    }

/**
 * Options of {@link checkAdapter}. An unknown key is a `TypeError` naming it.
 *
 * @group Conformance
 */
export interface CheckAdapterOptions {
  /** Streams of your protocol (include normal, partial, error and reasoning streams). */
  readonly streams: fc.Arbitrary<StreamSample>
  /**
   * Runs per property. The two properties over any bytes (`inspect` and `quickOutput`) spend
   * their first runs on the entries of `arbitraries.frameDataCorpus`, one frame each.
   * @default 100
   * @example
   * await checkAdapter(myAdapter, { streams, numRuns: 1_000 })
   */
  readonly numRuns?: number
  /**
   * fast-check's seed: the same seed draws the same inputs. A failure reports the one it ran.
   * @example
   * await checkAdapter(myAdapter, { streams, seed: 1_234_567 })
   */
  readonly seed?: number
  /**
   * fast-check's replay path of a failure, given with the `seed` and `property` it was reported
   * with: the property runs the reported counterexample first, so it fails on its first run
   * (and is not shrunk again). Paste what an {@link AdapterConformanceError} says.
   * @example
   * await checkAdapter(myAdapter, {
   *   streams,
   *   seed: 1_234_567,
   *   path: '41:2:0',
   *   property: 'inspect never throws, whatever the bytes',
   * })
   */
  readonly path?: string
  /**
   * Check only the property of this name (see {@link checkAdapter} for the list). A `path`
   * needs it: a replay path belongs to one property's run.
   * @example
   * await checkAdapter(myAdapter, { streams, property: 'renderStop after output writes well-formed frames that end the stream completed' })
   */
  readonly property?: string
}

/**
 * One conformance property failed. The message names it and shows the counterexample.
 *
 * @group Conformance
 */
export class AdapterConformanceError extends Error {
  override readonly name = 'AdapterConformanceError' as const
  /** The property that failed. */
  readonly property: string
  /** The adapter's name. */
  readonly adapter: string
  /** fast-check's seed and path: with {@link property}, the options that replay the failure. */
  readonly seed: number
  readonly path: string | undefined

  constructor(
    adapter: string,
    property: string,
    detail: string,
    seed: number,
    path: string | undefined,
    cause: unknown,
  ) {
    super(
      `Adapter "${adapter}" breaks the property "${property}".\n${detail}\n` +
        `Replay with { seed: ${seed}${path === undefined ? '' : `, path: '${path}'`}, property: '${property}' }.`,
      { cause },
    )
    this.property = property
    this.adapter = adapter
    this.seed = seed
    this.path = path
  }
}

/** The properties, in the order they run. */
const propertyNames = [
  'inspect never throws, whatever the bytes',
  'verdicts and the EOF class are the same under every chunking',
  'the EOF class is the one the sample states',
  'renderError writes one well-formed frame classified as error',
  'renderStop after output writes well-formed frames that end the stream completed',
  'quickOutput vouches only for output frames that neither end nor fail',
  'renderReasoningAsText writes visible text, never a keep-alive',
  'renderErrorBody writes a JSON object holding the sanitised message',
  'renderFromMessage writes whole SSE frames its adapter reads, whatever the JSON object',
  'usage is counts of the known fields, in verdicts and from usageOf, whatever the input',
] as const

type PropertyName = (typeof propertyNames)[number]

const checkAdapterDefaults = { numRuns: 100 } as const

/** Every option, so that an unknown one is refused (the compiler checks none is missing). */
const optionNames: Record<keyof CheckAdapterOptions, true> = {
  streams: true,
  numRuns: true,
  seed: true,
  path: true,
  property: true,
}

/** What fast-check is run with, for every property. */
interface RunParameters {
  readonly numRuns: number
  readonly seed?: number
  readonly path?: string
  readonly endOnFailure: boolean
}

interface NormalizedOptions {
  readonly streams: fc.Arbitrary<StreamSample>
  readonly property: PropertyName | undefined
  readonly parameters: RunParameters
}

/** Options checked up front, with exact messages, and merged with their defaults. */
function normalize(options: CheckAdapterOptions): NormalizedOptions {
  if (typeof options !== 'object' || options === null)
    throw new TypeError('checkAdapter: options must be an object with streams')
  const known = Object.keys(optionNames)
  for (const key of Object.keys(options)) {
    if (!Object.hasOwn(optionNames, key))
      throw new TypeError(`checkAdapter: unknown option "${key}"${didYouMean(key, known)}`)
  }
  const { streams, seed, path, property } = options
  if (typeof (streams as { generate?: unknown } | undefined)?.generate !== 'function')
    throw new TypeError('checkAdapter: streams must be a fast-check arbitrary of stream samples')
  const numRuns = positiveInteger('numRuns', options.numRuns ?? checkAdapterDefaults.numRuns)
  if (seed !== undefined && !Number.isInteger(seed))
    throw new RangeError(`seed must be an integer, got ${String(seed)}`)
  if (property !== undefined && !(propertyNames as readonly string[]).includes(property)) {
    throw new TypeError(
      `checkAdapter: unknown property "${property}"${didYouMean(property, propertyNames)}`,
    )
  }
  if (path !== undefined) {
    if (typeof path !== 'string' || !/^\d+(:\d+)*$/.test(path))
      throw new TypeError(
        `checkAdapter: path must be a replay path such as "41:2:0", got ${JSON.stringify(path)}`,
      )
    if (seed === undefined || property === undefined)
      throw new TypeError('checkAdapter: path needs the seed and property it was reported with')
  }
  return {
    streams,
    property: property as PropertyName | undefined,
    parameters: {
      numRuns,
      ...(seed === undefined ? {} : { seed }),
      ...(path === undefined ? {} : { path }),
      // A replay starts at the counterexample, already shrunk.
      endOnFailure: path !== undefined,
    },
  }
}

const decoder = new TextDecoder()
const encoder = new TextEncoder()

function bytesOf(sample: StreamSample): Uint8Array {
  return sample instanceof Uint8Array ? sample : sample.bytes
}

function show(bytes: Uint8Array): string {
  const text = JSON.stringify(decoder.decode(bytes))
  return text.length > 600 ? `${text.slice(0, 600)}…" (${bytes.length} bytes)` : text
}

function showValue(value: unknown): string {
  let text: string
  try {
    text = JSON.stringify(value) ?? String(value)
  } catch {
    text = String(value)
  }
  return text.length > 600 ? `${text.slice(0, 600)}… (${text.length} characters)` : text
}

async function framesOf(chunks: readonly Uint8Array[]): Promise<SseFrame[]> {
  const reader = createFrameReader(
    (async function* () {
      yield* chunks
    })(),
  )
  const frames: SseFrame[] = []
  for (let frame = await reader.next(); frame !== null; frame = await reader.next())
    frames.push(frame)
  return frames
}

/** A rule did not hold: the message says how, in plain words. */
class RuleBroken extends Error {}

function fail(message: string): never {
  throw new RuleBroken(message)
}

/** What went wrong, in one line: the rule broken, or the adapter method that threw and what. */
function reasonOf(error: unknown): string {
  if (error instanceof RuleBroken) return error.message
  if (isUserCodeError(error)) return `${error.message} (${reasonOf(error.cause)})`
  if (error instanceof Error) return `${error.name}: ${error.message}`
  return showValue(error)
}

function verdictText(verdicts: readonly FrameVerdict[]): string {
  return verdicts
    .map(
      (v) =>
        v.kind +
        ('terminal' in v && v.terminal !== undefined && v.kind !== 'terminal' ? '+terminal' : ''),
    )
    .join(', ')
}

/** The tracker after `bytes`, and its verdicts. */
async function track(
  adapter: StreamAdapter,
  chunks: readonly Uint8Array[],
): Promise<{ tracker: StreamTracker; verdicts: FrameVerdict[] }> {
  const tracker = createStreamTracker(adapter)
  const verdicts = (await framesOf(chunks)).map((frame) => tracker.observe(frame))
  return { tracker, verdicts }
}

/** Rendered bytes that are not whole SSE frames (one cut short, or bytes left over) fail. */
async function wholeFrames(method: string, rendered: Uint8Array): Promise<SseFrame[]> {
  if (!(rendered instanceof Uint8Array))
    fail(`adapter.${method} returned ${showValue(rendered)}, not a Uint8Array`)
  const frames = await framesOf([rendered])
  const joined = decoder.decode(concatBytes(frames.map((f) => f.raw)))
  if (!frames.every((f) => f.terminated) || joined !== decoder.decode(rendered))
    fail(`adapter.${method} wrote ${show(rendered)}, which is not whole SSE frames`)
  return frames
}

/** The failure of one property, ready to report. */
interface Failure {
  readonly detail: string
  readonly seed: number
  readonly path: string | undefined
  readonly error: unknown
}

/** One property: run with fast-check, its failure described in plain words. */
interface Conformance {
  run(parameters: RunParameters): Promise<Failure | undefined>
}

/** A property over `input` whose rule `holds` checks; `examples` run before random inputs. */
function conformance<T>(
  input: fc.Arbitrary<T>,
  holds: (value: T) => Promise<void>,
  describe: (value: T) => string,
  examples: readonly T[] = [],
): Conformance {
  return {
    async run(parameters) {
      const result = await fc.check(fc.asyncProperty(input, holds), {
        ...parameters,
        examples: examples.map((example): [T] => [example]),
      })
      if (!result.failed) return undefined
      const counterexample =
        result.counterexample === null
          ? 'no counterexample recorded'
          : describe(result.counterexample[0])
      return {
        detail: `${counterexample}\nWhat went wrong: ${reasonOf(result.errorInstance)}`,
        seed: result.seed,
        path: result.counterexamplePath ?? undefined,
        error: result.errorInstance,
      }
    },
  }
}

/** The arbitraries the properties draw from, made once per check. */
interface Inputs {
  readonly samples: fc.Arbitrary<StreamSample>
  /** The bytes of your streams. */
  readonly own: fc.Arbitrary<Uint8Array>
  /** Your streams, mostly as they are, sometimes mangled. */
  readonly prefixes: fc.Arbitrary<Uint8Array>
  /** Any bytes: your streams, random SSE, and mostly mangled streams. */
  readonly anyBytes: fc.Arbitrary<Uint8Array>
  /** The same, without data cut short. */
  readonly uncut: fc.Arbitrary<Uint8Array>
  /** One-frame streams of the data corpus, read before any random input. */
  readonly corpus: readonly Uint8Array[]
  readonly error: fc.Arbitrary<RenderableError>
}

function inputsOf(streams: fc.Arbitrary<StreamSample>): Inputs {
  const own = streams.map(bytesOf)
  const mangled = mangledStream(own)
  const any = (odd: fc.Arbitrary<Uint8Array>) =>
    fc.oneof(
      { weight: 1, arbitrary: own },
      { weight: 1, arbitrary: sseStream() },
      { weight: 4, arbitrary: odd },
    )
  return {
    samples: streams,
    own,
    prefixes: fc.oneof({ weight: 2, arbitrary: own }, { weight: 1, arbitrary: mangled }),
    anyBytes: any(mangled),
    uncut: any(mangledStream(own, { cut: false })),
    corpus: frameDataCorpus.map((data) => encoder.encode(dataFrameText(data))),
    error: fc.record(
      {
        type: fc.constantFrom(
          'overloaded_error',
          'upstream_error',
          'timeout',
          'invalid_request_error',
        ),
        message: fc.string({ maxLength: 200 }),
        code: fc.option(fc.constantFrom('context_length_exceeded', 'MALFORMED_FRAME')),
        status: fc.option(fc.integer({ min: 400, max: 599 })),
      },
      { requiredKeys: ['type', 'message'] },
    ),
  }
}

function inspectNeverThrows(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    inputs.anyBytes,
    async (bytes) => {
      const { tracker } = await track(adapter, [bytes])
      classifyEof(tracker.state)
    },
    (bytes) => `Input: ${show(bytes)}`,
    inputs.corpus,
  )
}

function sameUnderChunking(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    inputs.prefixes.chain((bytes) => chunkings(bytes).map((chunks) => ({ bytes, chunks }))),
    async ({ bytes, chunks }) => {
      const whole = await track(adapter, [bytes])
      const split = await track(adapter, chunks)
      if (JSON.stringify(whole.verdicts) !== JSON.stringify(split.verdicts))
        fail(`Whole: ${verdictText(whole.verdicts)}\nSplit: ${verdictText(split.verdicts)}`)
      const eofA = classifyEof(whole.tracker.state).kind
      const eofB = classifyEof(split.tracker.state).kind
      if (eofA !== eofB) fail(`EOF class ${eofA} in one piece, ${eofB} when split`)
    },
    ({ bytes, chunks }) =>
      `Stream: ${show(bytes)}\nSplit into ${chunks.length} chunks of ${chunks.map((c) => c.length).join(', ')} bytes`,
  )
}

function statedEof(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    inputs.samples,
    async (sample) => {
      if (sample instanceof Uint8Array || sample.eof === undefined) return
      const { tracker, verdicts } = await track(adapter, [sample.bytes])
      const eof = classifyEof(tracker.state).kind
      if (eof !== sample.eof)
        fail(`Expected ${sample.eof}, classified ${eof}. Verdicts: ${verdictText(verdicts)}`)
    },
    (sample) => `Stream: ${show(bytesOf(sample))}`,
  )
}

function renderErrorIsError(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    fc.record({ before: inputs.prefixes, error: inputs.error }),
    async ({ before, error }) => {
      const { tracker } = await track(adapter, [before])
      const rendered = adapter.renderError(error, tracker.state)
      if (!(rendered instanceof Uint8Array))
        fail(`adapter.renderError returned ${showValue(rendered)}, not a Uint8Array`)
      const frames = await framesOf([rendered])
      if (frames.length !== 1 || frames[0]?.terminated !== true)
        fail(`Rendered ${frames.length} frames: ${show(rendered)}`)
      const verdict = adapter.inspect(frames[0] as SseFrame)
      if (verdict.kind !== 'error')
        fail(`Rendered error ${show(rendered)} was classified ${verdict.kind}`)
      const expected = sanitizeMessage(error.message)
      if (verdict.error.message !== expected) {
        fail(
          `The message came back as ${JSON.stringify(verdict.error.message)}, not ${JSON.stringify(expected)}`,
        )
      }
    },
    ({ before, error }) => `After: ${show(before)}\nError: ${showValue(error)}`,
  )
}

function renderStopCompletes(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    fc.record({ stream: inputs.prefixes, cut: fc.nat() }),
    async ({ stream, cut }) => {
      const tracker = createStreamTracker(adapter)
      const all = await framesOf([stream])
      // Stop where the stream had output but no terminal yet.
      for (const frame of all.slice(0, cut % (all.length + 1))) tracker.observe(frame)
      const state = tracker.state
      if (state.firstVisibleIndex === null || state.terminalSeen || state.errors > 0) return
      const rendered = adapter.renderStop(state)
      const verdicts = (await wholeFrames('renderStop', rendered)).map((f) => tracker.observe(f))
      const eof = classifyEof(tracker.state).kind
      if (eof !== 'completed')
        fail(
          `After the rendered stop ${show(rendered)} the stream is ${eof} (verdicts: ${verdictText(verdicts)})`,
        )
    },
    ({ stream, cut }) => `Stream: ${show(stream)}, cut after frame index ${cut}`,
  )
}

function quickOutputIsOutput(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    // No data cut short: a cheap byte check cannot see JSON end early (the shipped ones do not).
    inputs.uncut,
    async (bytes) => {
      if (adapter.quickOutput === undefined) return
      for (const frame of await framesOf([bytes])) {
        if (!adapter.quickOutput(frame)) continue
        const verdict = adapter.inspect(frame)
        const ends = 'terminal' in verdict && verdict.terminal !== undefined
        if (
          verdict.kind === 'error' ||
          verdict.kind === 'keepalive' ||
          verdict.kind === 'terminal' ||
          ends
        ) {
          fail(
            `quickOutput said ordinary output, inspect said ${verdict.kind}${ends ? '+terminal' : ''} for ${show(frame.raw)}`,
          )
        }
      }
    },
    (bytes) => `Input: ${show(bytes)}`,
    inputs.corpus,
  )
}

function reasoningAsText(adapter: StreamAdapter): Conformance {
  return conformance(
    fc.record({
      reasoning: fc.string({ minLength: 1, maxLength: 200 }),
      firstData: fc.option(frameData(), { nil: undefined }),
    }),
    async ({ reasoning, firstData }) => {
      const state: RenderState = {
        frames: 0,
        firstData,
        openBlocks: [],
        lastBlockIndex: -1,
        counts: { text: 0, tool: 0, reasoning: 1, refusal: 0 },
        reasoningText: reasoning,
        visibleText: '',
      }
      const rendered = adapter.renderReasoningAsText(state)
      const frames = await wholeFrames('renderReasoningAsText', rendered)
      const verdicts = frames.map((f) => adapter.inspect(f))
      if (verdicts.some((v) => v.kind === 'keepalive'))
        fail(`A frame of ${show(rendered)} was classified as a keep-alive`)
      const text = verdicts.map((v) => (v.kind === 'text' ? v.text : '')).join('')
      if (text !== reasoning)
        fail(`The promoted text reads ${JSON.stringify(text)}, not ${JSON.stringify(reasoning)}`)
    },
    ({ reasoning, firstData }) =>
      `Reasoning: ${JSON.stringify(reasoning)}, first data: ${showValue(firstData)}`,
  )
}

/** Whether `value` (parsed JSON) holds the string `text` at any depth. */
function holdsString(value: unknown, text: string): boolean {
  if (typeof value === 'string') return value === text
  if (typeof value !== 'object' || value === null) return false
  return Object.values(value).some((inner) => holdsString(inner, text))
}

function errorBodyHoldsMessage(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    inputs.error,
    async (error) => {
      if (adapter.renderErrorBody === undefined) return
      const body = adapter.renderErrorBody(error)
      let parsed: unknown
      try {
        parsed = JSON.parse(body)
      } catch {
        fail(`The body ${JSON.stringify(body)} is not JSON`)
      }
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
        fail(`The body ${JSON.stringify(body)} is not a JSON object`)
      const expected = sanitizeMessage(error.message)
      if (!holdsString(parsed, expected))
        fail(
          `The body ${JSON.stringify(body)} does not hold the message ${JSON.stringify(expected)}`,
        )
    },
    (error) => `Error: ${showValue(error)}`,
  )
}

function renderFromMessageReads(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    wrongShapeMessage(inputs.own),
    async (message) => {
      if (adapter.renderFromMessage === undefined) return
      const rendered = adapter.renderFromMessage(message)
      for (const frame of await wholeFrames('renderFromMessage', rendered)) adapter.inspect(frame)
    },
    (message) => `Message: ${showValue(message)}`,
  )
}

/** The fields a reported usage may have. */
const usageFields = [
  'inputTokens',
  'outputTokens',
  'cachedInputTokens',
  'cacheCreationInputTokens',
  'reasoningTokens',
]

/** Why `usage` is not a usage report, or `undefined` when it is one. */
function badUsage(usage: unknown): string | undefined {
  if (usage === undefined) return undefined
  if (typeof usage !== 'object' || usage === null)
    return `usage is ${showValue(usage)}, not an object`
  for (const [key, value] of Object.entries(usage)) {
    if (!usageFields.includes(key)) return `usage has an unknown field "${key}"`
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0)
      return `usage.${key} is ${showValue(value)}, not a count`
  }
  return undefined
}

function usageIsCounts(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    fc.tuple(inputs.anyBytes, wrongShapeMessage(inputs.own)),
    async ([bytes, message]) => {
      const { verdicts } = await track(adapter, [bytes])
      for (const verdict of verdicts) {
        const bad = badUsage((verdict as { usage?: unknown }).usage)
        if (bad !== undefined) fail(`A ${verdict.kind} verdict's ${bad}`)
      }
      if (adapter.usageOf === undefined) return
      const bad = badUsage(adapter.usageOf(message))
      if (bad !== undefined) fail(`usageOf: ${bad}`)
    },
    ([bytes, message]) => `Input: ${show(bytes)}\nMessage: ${showValue(message)}`,
  )
}

/** Every property, by name: the compiler checks none is missing. */
function conformances(
  adapter: StreamAdapter,
  inputs: Inputs,
): Record<PropertyName, () => Conformance> {
  return {
    'inspect never throws, whatever the bytes': () => inspectNeverThrows(adapter, inputs),
    'verdicts and the EOF class are the same under every chunking': () =>
      sameUnderChunking(adapter, inputs),
    'the EOF class is the one the sample states': () => statedEof(adapter, inputs),
    'renderError writes one well-formed frame classified as error': () =>
      renderErrorIsError(adapter, inputs),
    'renderStop after output writes well-formed frames that end the stream completed': () =>
      renderStopCompletes(adapter, inputs),
    'quickOutput vouches only for output frames that neither end nor fail': () =>
      quickOutputIsOutput(adapter, inputs),
    'renderReasoningAsText writes visible text, never a keep-alive': () => reasoningAsText(adapter),
    'renderErrorBody writes a JSON object holding the sanitised message': () =>
      errorBodyHoldsMessage(adapter, inputs),
    'renderFromMessage writes whole SSE frames its adapter reads, whatever the JSON object': () =>
      renderFromMessageReads(adapter, inputs),
    'usage is counts of the known fields, in verdicts and from usageOf, whatever the input': () =>
      usageIsCounts(adapter, inputs),
  }
}

/**
 * Runs the conformance properties on `adapter`, in this order, each named after the rule it
 * checks:
 *
 * 1. **inspect never throws, whatever the bytes**: `inspect` returns a verdict for every frame
 *    (malformed input is an `error` verdict), and the stream's EOF class can be read after
 *    them. The bytes: each entry of `arbitraries.frameDataCorpus` as a one-frame stream
 *    first, then your streams, `arbitraries.sseStream()`, and mostly
 *    `arbitraries.mangledStream(streams)`: your streams with frames whose `data` is a JSON
 *    scalar (`null` most often), an array, JSON nested 20–100 levels deep, an object with
 *    the protocol's keys holding wrong-typed values (`choices: null`, `delta: 5`,
 *    `content: {}`, also at the paths your own frames use), non-JSON text, empty or
 *    multi-line.
 * 2. **verdicts and the EOF class are the same under every chunking**: a stream (yours, or
 *    mangled) gives the same verdicts and the same `classifyEof` class whether it arrives
 *    whole or split anywhere (one byte at a time, inside CRLF, inside a multibyte character).
 * 3. **the EOF class is the one the sample states**: a sample `{ bytes, eof }` ends as `eof`.
 * 4. **renderError writes one well-formed frame classified as error**: after any stream (yours,
 *    or mangled), `renderError({ type, message, code?, status? }, state)` returns exactly one
 *    whole SSE frame; `inspect` reads it as `error`, and its `error.message` equals
 *    `sanitizeMessage(message)`: the message round-trips through the library's sanitiser.
 * 5. **renderStop after output writes well-formed frames that end the stream completed**: cut
 *    a stream where it had visible output, no terminal and no error; `renderStop(state)`
 *    returns whole SSE frames (every one terminated, no bytes left over), and after them the
 *    stream's EOF class is `completed`.
 * 6. **quickOutput vouches only for output frames that neither end nor fail** (when the adapter
 *    has `quickOutput`): for every frame it returns `true` on, `inspect` says neither `error`,
 *    `keepalive` nor `terminal`, and sets no `terminal`.
 * 7. **renderReasoningAsText writes visible text, never a keep-alive**: for any non-empty
 *    reasoning (and any `firstData`, odd ones included), `renderReasoningAsText(state)` returns
 *    whole SSE frames, none of them a keep-alive, whose `text` verdicts join to exactly the
 *    reasoning.
 * 8. **renderErrorBody writes a JSON object holding the sanitised message** (when the adapter
 *    has `renderErrorBody`): the body parses as a JSON object, and one of its string values, at
 *    any depth, equals `sanitizeMessage(message)`.
 * 9. **renderFromMessage writes whole SSE frames its adapter reads, whatever the JSON object**
 *    (when the adapter has `renderFromMessage`): for any JSON object (protocol keys holding
 *    wrong-typed values, objects from your streams' frames, random objects) it returns whole
 *    SSE frames, and `inspect` reads each of them.
 * 10. **usage is counts of the known fields, in verdicts and from usageOf, whatever the
 *    input**: every `usage` a verdict carries (over the same bytes as property 1), and what
 *    `usageOf` returns for any JSON object (when the adapter has it), is `undefined` or an
 *    object whose fields are among `inputTokens`, `outputTokens`, `cachedInputTokens`,
 *    `cacheCreationInputTokens` and `reasoningTokens`, each a non-negative safe integer.
 *
 * In every property, an adapter method that throws, or returns the wrong kind of value
 * (`inspect` an object with a `kind`, a renderer a `Uint8Array`, `renderErrorBody` a string),
 * breaks that property, and the reason names the method: `adapter.inspect threw (TypeError: boom)`.
 *
 * Resolves when all hold; rejects with an {@link AdapterConformanceError} naming the first
 * property that failed, its counterexample and the options that replay it
 * (`{ seed, path, property }`). Options are checked first: an unknown key is a `TypeError`
 * naming it (`checkAdapter: unknown option "numRun"; did you mean "numRuns"?`).
 *
 * @example
 * await checkAdapter(myAdapter, { streams: myStreamArbitrary, numRuns: 200 })
 *
 * @group Conformance
 */
export async function checkAdapter(
  adapter: StreamAdapter,
  options: CheckAdapterOptions,
): Promise<void> {
  const { streams, property, parameters } = normalize(options)
  const guarded = guardMethods(
    adapter,
    'adapter',
    (component, cause, what) => new UserCodeError(component, cause, what),
    adapterReturns,
  )
  const table = conformances(guarded, inputsOf(streams))
  for (const name of propertyNames) {
    if (property !== undefined && name !== property) continue
    const failure = await table[name]().run(parameters)
    if (failure === undefined) continue
    throw new AdapterConformanceError(
      adapter.name,
      name,
      failure.detail,
      failure.seed,
      failure.path,
      failure.error,
    )
  }
}
