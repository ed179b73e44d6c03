/**
 * The conformance properties `checkAdapter` runs, one function each, and what they share:
 * tracking a stream, the inputs, and how a broken rule is reported.
 *
 * @module
 */

import fc from 'fast-check'
import { classifyEof, createStreamTracker, type StreamTracker } from '../classify/index.js'
import { isUserCodeError } from '../errors.js'
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
import type { RunParameters, StreamSample } from './samples.js'

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

/**
 * A rule did not hold: the message says how, in plain words, and `fix` what to change when the
 * cause is plain. It keeps no stack: its frames would be this package's files, not the user's.
 */
class RuleBroken extends Error {
  override readonly name = 'RuleBroken'
  constructor(
    message: string,
    readonly fix: string | undefined,
  ) {
    super(message)
    this.stack = `${this.name}: ${message}`
  }
}

function fail(message: string, fix?: string): never {
  throw new RuleBroken(message, fix)
}

/** How to fix a message that did not come back as it went in. */
const keepTheMessage = (method: string) =>
  `${method} must write the message it is given, sanitised as the library does: put sanitizeMessage(error.message) (from 'stream-boundary/advanced') where your inspect reads the error's message, not a fixed text, an empty one or the raw message`

/** How to fix bytes that are not whole SSE frames. */
const wholeFrameFix = (method: string) =>
  `${method} must return a Uint8Array of whole SSE frames, each ending with a blank line: new TextEncoder().encode(\`data: \${JSON.stringify(body)}\\n\\n\`)`

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
    fail(
      `adapter.${method} returned ${showValue(rendered)}, not a Uint8Array`,
      wholeFrameFix(method),
    )
  const frames = await framesOf([rendered])
  const joined = decoder.decode(concatBytes(frames.map((f) => f.raw)))
  if (!frames.every((f) => f.terminated) || joined !== decoder.decode(rendered))
    fail(
      `adapter.${method} wrote ${show(rendered)}, which is not whole SSE frames`,
      wholeFrameFix(method),
    )
  return frames
}

/** The failure of one property, ready to report. */
interface Failure {
  readonly detail: string
  /** What to change, when the broken rule says it. */
  readonly fix: string | undefined
  readonly seed: number
  readonly path: string | undefined
  readonly error: unknown
}

/** One property: run with fast-check, its failure described in plain words. */
export interface Conformance {
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
        fix: result.errorInstance instanceof RuleBroken ? result.errorInstance.fix : undefined,
        seed: result.seed,
        path: result.counterexamplePath ?? undefined,
        error: result.errorInstance,
      }
    },
  }
}

/** The arbitraries the properties draw from, made once per check. */
export interface Inputs {
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

export function inputsOf(streams: fc.Arbitrary<StreamSample>): Inputs {
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

export function inspectNeverThrows(adapter: StreamAdapter, inputs: Inputs): Conformance {
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

export function sameUnderChunking(adapter: StreamAdapter, inputs: Inputs): Conformance {
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

export function statedEof(adapter: StreamAdapter, inputs: Inputs): Conformance {
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

export function renderErrorIsError(adapter: StreamAdapter, inputs: Inputs): Conformance {
  return conformance(
    fc.record({ before: inputs.prefixes, error: inputs.error }),
    async ({ before, error }) => {
      const { tracker } = await track(adapter, [before])
      const rendered = adapter.renderError(error, tracker.state)
      if (!(rendered instanceof Uint8Array))
        fail(
          `adapter.renderError returned ${showValue(rendered)}, not a Uint8Array`,
          wholeFrameFix('renderError'),
        )
      const frames = await framesOf([rendered])
      if (frames.length !== 1 || frames[0]?.terminated !== true)
        fail(
          `Rendered ${frames.length} frames: ${show(rendered)}`,
          'renderError must return exactly one whole SSE frame (ending with a blank line), the one your protocol uses for an error',
        )
      const verdict = adapter.inspect(frames[0] as SseFrame)
      if (verdict.kind !== 'error')
        fail(
          `Rendered error ${show(rendered)} was classified ${verdict.kind}`,
          'renderError must write the frame your own inspect reads as { kind: "error" }: the same event name and error field inspect looks for',
        )
      const expected = sanitizeMessage(error.message)
      if (verdict.error.message !== expected) {
        fail(
          `The message came back as ${JSON.stringify(verdict.error.message)}, not ${JSON.stringify(expected)}`,
          keepTheMessage('renderError'),
        )
      }
    },
    ({ before, error }) => `After: ${show(before)}\nError: ${showValue(error)}`,
  )
}

export function renderStopCompletes(adapter: StreamAdapter, inputs: Inputs): Conformance {
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

export function quickOutputIsOutput(adapter: StreamAdapter, inputs: Inputs): Conformance {
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

export function reasoningAsText(adapter: StreamAdapter): Conformance {
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

export function errorBodyHoldsMessage(adapter: StreamAdapter, inputs: Inputs): Conformance {
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
          keepTheMessage('renderErrorBody'),
        )
    },
    (error) => `Error: ${showValue(error)}`,
  )
}

export function renderFromMessageReads(adapter: StreamAdapter, inputs: Inputs): Conformance {
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

export function usageIsCounts(adapter: StreamAdapter, inputs: Inputs): Conformance {
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
