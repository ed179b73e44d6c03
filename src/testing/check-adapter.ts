/**
 * `checkAdapter()`: the conformance properties every `StreamAdapter` must hold, run with
 * fast-check against the adapter author's own stream generator. The first counterexample
 * is reported in plain words.
 *
 * @module
 */

import fc from 'fast-check'
import { classifyEof, createStreamTracker } from '../classify/index.js'
import { sanitizeMessage } from '../protocols/sanitize.js'
import type { FrameVerdict, RenderState, StreamAdapter } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import { createFrameReader } from '../sse/reader.js'
import { chunkings, concatBytes, sseStream } from './arbitraries.js'

/** A stream for the harness: bytes, optionally with the EOF class it must end as. */
export type StreamSample =
  | Uint8Array
  | {
      readonly bytes: Uint8Array
      readonly eof?: 'completed' | 'partial' | 'thinking-only' | 'error-only' | 'empty'
    }

/** Options of {@link checkAdapter}. */
export interface CheckAdapterOptions {
  /** Streams of your protocol (include normal, partial, error and reasoning streams). */
  readonly streams: fc.Arbitrary<StreamSample>
  /**
   * Runs per property.
   * @default 100
   */
  readonly numRuns?: number
  /** A seed, to replay a failure. */
  readonly seed?: number
}

/** One conformance property failed. The message names it and shows the counterexample. */
export class AdapterConformanceError extends Error {
  override readonly name = 'AdapterConformanceError' as const
  /** The property that failed. */
  readonly property: string
  /** The adapter's name. */
  readonly adapter: string
  /** fast-check's seed and path, to replay the failure. */
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
        `Replay with { seed: ${seed}${path === undefined ? '' : `, path: '${path}'`} }.`,
      { cause },
    )
    this.property = property
    this.adapter = adapter
    this.seed = seed
    this.path = path
  }
}

const decoder = new TextDecoder()

function bytesOf(sample: StreamSample): Uint8Array {
  return sample instanceof Uint8Array ? sample : sample.bytes
}

function show(bytes: Uint8Array): string {
  const text = JSON.stringify(decoder.decode(bytes))
  return text.length > 600 ? `${text.slice(0, 600)}…" (${bytes.length} bytes)` : text
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

function fail(message: string): never {
  throw new Error(message)
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

/**
 * Runs the conformance properties on `adapter`, each named after what it checks:
 *
 * - inspect never throws, whatever the bytes (malformed input is an `error` verdict);
 * - verdicts and the EOF class are the same under every chunking;
 * - the EOF class is the one a sample states (when it states one);
 * - `renderError` writes one well-formed frame the adapter classifies as `error`;
 * - `renderStop` after output writes well-formed frames that end the stream `completed`;
 * - `renderReasoningAsText` writes visible text, never a keep-alive;
 * - `quickOutput` (when the adapter has it) vouches only for output frames that neither end
 *   nor fail.
 *
 * Resolves when all hold; rejects with an {@link AdapterConformanceError} naming the first
 * property that failed, its counterexample and how to replay it.
 *
 * @example
 * await checkAdapter(myAdapter, { streams: myStreamArbitrary, numRuns: 200 })
 */
export async function checkAdapter(
  adapter: StreamAdapter,
  options: CheckAdapterOptions,
): Promise<void> {
  const numRuns = options.numRuns ?? 100
  const base = options.seed === undefined ? {} : { seed: options.seed }

  const properties: [string, fc.IAsyncPropertyWithHooks<never>, (value: unknown) => string][] = [
    [
      'inspect never throws, whatever the bytes',
      fc.asyncProperty(fc.oneof(options.streams.map(bytesOf), sseStream()), async (bytes) => {
        const tracker = createStreamTracker(adapter)
        for (const frame of await framesOf([bytes])) tracker.observe(frame)
        classifyEof(tracker.state)
      }) as never,
      (value) => `Input: ${show((value as [Uint8Array])[0])}`,
    ],
    [
      'verdicts and the EOF class are the same under every chunking',
      fc.asyncProperty(
        options.streams.chain((sample) =>
          chunkings(bytesOf(sample)).map((chunks) => ({ bytes: bytesOf(sample), chunks })),
        ),
        async ({ bytes, chunks }) => {
          const whole = createStreamTracker(adapter)
          const split = createStreamTracker(adapter)
          const a = (await framesOf([bytes])).map((f) => whole.observe(f))
          const b = (await framesOf(chunks)).map((f) => split.observe(f))
          if (JSON.stringify(a) !== JSON.stringify(b))
            fail(`Whole: ${verdictText(a)}\nSplit: ${verdictText(b)}`)
          const eofA = classifyEof(whole.state).kind
          const eofB = classifyEof(split.state).kind
          if (eofA !== eofB) fail(`EOF class ${eofA} in one piece, ${eofB} when split`)
        },
      ) as never,
      (value) => {
        const { bytes, chunks } = (value as [{ bytes: Uint8Array; chunks: Uint8Array[] }])[0]
        return `Stream: ${show(bytes)}\nSplit into ${chunks.length} chunks of ${chunks.map((c) => c.length).join(', ')} bytes`
      },
    ],
    [
      'the EOF class is the one the sample states',
      fc.asyncProperty(options.streams, async (sample) => {
        if (sample instanceof Uint8Array || sample.eof === undefined) return
        const tracker = createStreamTracker(adapter)
        const verdicts = (await framesOf([sample.bytes])).map((f) => tracker.observe(f))
        const eof = classifyEof(tracker.state).kind
        if (eof !== sample.eof)
          fail(`Expected ${sample.eof}, classified ${eof}. Verdicts: ${verdictText(verdicts)}`)
      }) as never,
      (value) => `Stream: ${show(bytesOf((value as [StreamSample])[0]))}`,
    ],
    [
      'renderError writes one well-formed frame classified as error',
      fc.asyncProperty(
        options.streams,
        fc.constantFrom('overloaded_error', 'upstream_error', 'timeout', 'invalid_request_error'),
        fc.string({ maxLength: 200 }),
        async (sample, type, message) => {
          const tracker = createStreamTracker(adapter)
          for (const frame of await framesOf([bytesOf(sample)])) tracker.observe(frame)
          const rendered = adapter.renderError({ type, message }, tracker.state)
          const frames = await framesOf([rendered])
          if (frames.length !== 1 || frames[0]?.terminated !== true)
            fail(`Rendered ${frames.length} frames: ${show(rendered)}`)
          const verdict = adapter.inspect(frames[0] as SseFrame)
          if (verdict.kind !== 'error')
            fail(`Rendered error ${show(rendered)} was classified ${verdict.kind}`)
          if (verdict.error.message !== sanitizeMessage(message)) {
            fail(
              `The message came back as ${JSON.stringify(verdict.error.message)}, not ${JSON.stringify(sanitizeMessage(message))}`,
            )
          }
        },
      ) as never,
      (value) => {
        const [sample, type, message] = value as [StreamSample, string, string]
        return `After: ${show(bytesOf(sample))}\nError: ${JSON.stringify({ type, message })}`
      },
    ],
    [
      'renderStop after output writes well-formed frames that end the stream completed',
      fc.asyncProperty(options.streams, fc.nat(), async (sample, cut) => {
        const tracker = createStreamTracker(adapter)
        const all = await framesOf([bytesOf(sample)])
        // Stop where the stream had output but no terminal yet.
        for (const frame of all.slice(0, all.length === 0 ? 0 : cut % (all.length + 1)))
          tracker.observe(frame)
        const state = tracker.state
        if (state.firstVisibleIndex === null || state.terminalSeen || state.errors > 0) return
        const rendered = adapter.renderStop(state)
        const frames = await framesOf([rendered])
        if (
          !frames.every((f) => f.terminated) ||
          decoder.decode(concatBytes(frames.map((f) => f.raw))) !== decoder.decode(rendered)
        ) {
          fail(`The rendered stop is not whole SSE frames: ${show(rendered)}`)
        }
        const verdicts = frames.map((f) => tracker.observe(f))
        const eof = classifyEof(tracker.state).kind
        if (eof !== 'completed')
          fail(
            `After the rendered stop ${show(rendered)} the stream is ${eof} (verdicts: ${verdictText(verdicts)})`,
          )
      }) as never,
      (value) => {
        const [sample, cut] = value as [StreamSample, number]
        return `Stream: ${show(bytesOf(sample))}, cut after frame index ${cut}`
      },
    ],
    [
      'quickOutput vouches only for output frames that neither end nor fail',
      fc.asyncProperty(fc.oneof(options.streams.map(bytesOf), sseStream()), async (bytes) => {
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
      }) as never,
      (value) => `Input: ${show((value as [Uint8Array])[0])}`,
    ],
    [
      'renderReasoningAsText writes visible text, never a keep-alive',
      fc.asyncProperty(fc.string({ minLength: 1, maxLength: 200 }), async (reasoning) => {
        const state: RenderState = {
          frames: 0,
          firstData: undefined,
          openBlocks: [],
          lastBlockIndex: -1,
          counts: { text: 0, tool: 0, reasoning: 1, refusal: 0 },
          reasoningText: reasoning,
          visibleText: '',
        }
        const rendered = adapter.renderReasoningAsText(state)
        const verdicts = (await framesOf([rendered])).map((f) => adapter.inspect(f))
        if (verdicts.some((v) => v.kind === 'keepalive'))
          fail(`A frame of ${show(rendered)} was classified as a keep-alive`)
        const text = verdicts.map((v) => (v.kind === 'text' ? v.text : '')).join('')
        if (text !== reasoning)
          fail(`The promoted text reads ${JSON.stringify(text)}, not ${JSON.stringify(reasoning)}`)
      }) as never,
      (value) => `Reasoning: ${JSON.stringify((value as [string])[0])}`,
    ],
  ]

  for (const [name, property, describe] of properties) {
    const result = (await fc.check(property, {
      ...base,
      numRuns,
    })) as unknown as fc.RunDetails<unknown>
    if (!result.failed) continue
    const counterexample =
      result.counterexample === null
        ? 'no counterexample recorded'
        : describe(result.counterexample)
    const cause = result.errorInstance
    const reason = cause instanceof Error ? cause.message : String(cause)
    throw new AdapterConformanceError(
      adapter.name,
      name,
      `${counterexample}\nWhat went wrong: ${reason}`,
      result.seed,
      result.counterexamplePath ?? undefined,
      cause,
    )
  }
}
