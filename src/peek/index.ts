/**
 * The retry window: read frames without committing anything downstream until the upstream
 * proves it is producing output, then hand the same reader (with all it buffered) on.
 *
 * @module
 */

import { now } from '../call-safely.js'
import {
  classifyEof,
  createStreamTracker,
  type EofClass,
  type StreamTracker,
  type StreamTrackerOptions,
} from '../classify/index.js'
import {
  type FrameTooLargeError,
  isFrameTooLargeError,
  isUpstreamReadError,
  PeekOverflowError,
  StreamTimeoutError,
  type UpstreamReadError,
} from '../errors.js'
import {
  countNormalization,
  positiveInteger,
  rejectUnknownKeys,
  timeoutMilliseconds,
} from '../options.js'
import type { FrameVerdict, StreamAdapter, UpstreamErrorInfo } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import { type FrameReader, nextOn } from '../sse/reader.js'
import type { SignalLike } from '../stop.js'
import type { FirstOutputClock } from './clock.js'

/**
 * Which verdict ends the peek and allows a commit.
 *
 * @group Peek and classify
 */
export type CommitOn = 'visible' | 'content' | 'first-frame'

/**
 * Options of {@link peekFirstOutput}.
 *
 * @group Peek and classify
 */
export interface PeekOptions {
  /**
   * What counts as output: `visible` = text, tool, refusal or reasoning; `content` = text,
   * tool or refusal (reasoning is held); `first-frame` = any frame that is not a keep-alive.
   * A terminal frame always ends the peek (the upstream answered, even if with nothing).
   * @default 'visible'
   * @example peekFirstOutput(reader, openaiChat, { commitOn: 'content' })
   */
  commitOn?: CommitOn
  /**
   * Give up when the upstream body has sent no byte at all after this many milliseconds.
   * `Infinity` turns it off; `0`, negatives and `NaN` are a `RangeError`.
   * @default 30_000 (30 s: covers most prefill times and a queue for capacity; a stream that
   *   sends not one byte for that long is almost always dead. Raise it for an upstream that
   *   may send nothing at all while a reasoning model thinks, such as OpenAI Chat Completions
   *   with o-series models; keep-alive comments count as bytes here, never as output)
   * @example { firstByteTimeoutMs: 10_000 }
   */
  firstByteTimeoutMs?: number | undefined
  /**
   * Give up when no output arrived after this many milliseconds, whatever else arrived:
   * bytes, keep-alives, role-only or usage-only frames never reset it. `Infinity` turns it
   * off; `0`, negatives and `NaN` are a `RangeError`.
   * @default 600_000 (10 minutes: reasoning models may think for minutes while sending only
   *   keep-alives; 10 minutes never cuts a legitimate one and never leaves a client waiting
   *   for hours)
   * @example { firstOutputTimeoutMs: 30_000 }
   */
  firstOutputTimeoutMs?: number | undefined
  /**
   * Give up when, before any output, the upstream sent no byte at all for this many
   * milliseconds: keep-alives, pings and preambles count as bytes, so a thinking model that
   * sends them is never cut. `Infinity` turns it off; `0`, negatives and `NaN` are a
   * `RangeError`.
   * @default 90_000 where the adapter says its protocol sends bytes while a model thinks
   *   (`sendsWhileThinking`: Anthropic Messages, OpenAI Responses), else off. 90 s is the
   *   stream watchdog of Claude Code, Anthropic's own client: it ends a stream silent that
   *   long and falls back; Responses sends a keep-alive event every 30 s, so 90 s is three
   *   missed. Chat Completions and Gemini may send nothing while a model thinks: there only
   *   `firstOutputTimeoutMs` bounds the wait unless this is set
   * @example { silenceTimeoutMs: 60_000 }
   */
  silenceTimeoutMs?: number | undefined
  /**
   * When the first-byte and first-output clocks started, as a `performance.now()` time. A
   * caller that sent the request earlier passes when it did, so connect and headers count
   * against both bounds; the peek then waits only for what is left of them.
   * @default the moment the peek starts
   * @example { clockStartedAt: attemptSentAt }
   */
  clockStartedAt?: number | undefined
  /**
   * The most bytes of frames held before output. Past it, a stream that sent any frame other
   * than a keep-alive (reasoning held under `commitOn: 'content'`, preambles, frames no
   * adapter knows) is committed (`trigger: 'bound'`): a live upstream is never refused for
   * holding too much. Only keep-alives alone past it are `peek-overflow`, which `relay()` does
   * not retry (another attempt would end the same way).
   * @default 1_048_576 (1 MiB)
   */
  maxPeekBytes?: number
  /**
   * The most frames held before output, keep-alive comments not counted; past it, as for
   * `maxPeekBytes`.
   * @default 4096
   */
  maxPeekFrames?: number
  /** Aborting ends the peek with `aborted` (the client went away). */
  signal?: AbortSignal | undefined
  /** A tracker to continue with; by default a new one over the adapter. */
  tracker?: StreamTracker
  /** Options of the tracker peek creates. */
  trackerOptions?: StreamTrackerOptions
}

/**
 * Defaults of {@link PeekOptions}.
 *
 * @group Peek and classify
 */
export const peekDefaults = Object.freeze({
  commitOn: 'visible' as CommitOn,
  firstByteTimeoutMs: 30_000,
  firstOutputTimeoutMs: 600_000,
  silenceTimeoutMs: 90_000,
  maxPeekBytes: 1_048_576,
  maxPeekFrames: 4096,
})

interface PeekBase {
  /** Every frame consumed, in order, preamble included. */
  readonly frames: readonly SseFrame[]
  /** The same reader, with whatever it still buffers. */
  readonly reader: FrameReader
  /** The tracker that observed every frame. */
  readonly tracker: StreamTracker
  /** How long the peek took, in milliseconds. */
  readonly elapsedMs: number
}

/**
 * How a peek ended. `output` means commit and pump; every other kind means nothing was
 * committed, and all but `aborted` (and a non-retryable `error-frame`) are worth a retry.
 * On any kind but `output`, release the reader (`reader.cancel()`) unless you go on reading.
 *
 * @group Peek and classify
 */
export type PeekOutcome =
  | (PeekBase & {
      readonly kind: 'output'
      /**
       * `output` (per `commitOn`), `terminal` (the upstream ended its answer before any), or
       * `bound` (a peek bound was reached by a stream that sent frames other than keep-alives:
       * reasoning held under `commitOn: 'content'`, preambles, frames no adapter knows;
       * committed rather than retried).
       */
      readonly trigger: 'output' | 'terminal' | 'bound'
      /** The verdict that ended the peek. */
      readonly verdict: FrameVerdict
    })
  | (PeekBase & { readonly kind: 'empty'; readonly eof: EofClass })
  | (PeekBase & { readonly kind: 'thinking-only'; readonly eof: EofClass })
  | (PeekBase & { readonly kind: 'error-frame'; readonly error: UpstreamErrorInfo })
  | (PeekBase & {
      readonly kind: 'first-byte-timeout' | 'first-output-timeout' | 'silence-timeout'
      readonly error: StreamTimeoutError
      /** Bytes of a half-read frame left in the reader when the timeout fired. */
      readonly partialFrameBytes: number
    })
  | (PeekBase & {
      readonly kind: 'peek-overflow'
      readonly error: PeekOverflowError | FrameTooLargeError
    })
  | (PeekBase & { readonly kind: 'read-error'; readonly error: UpstreamReadError })
  | (PeekBase & { readonly kind: 'aborted'; readonly reason: unknown })

const optionKeys = Object.keys({
  commitOn: true,
  firstByteTimeoutMs: true,
  firstOutputTimeoutMs: true,
  silenceTimeoutMs: true,
  clockStartedAt: true,
  maxPeekBytes: true,
  maxPeekFrames: true,
  signal: true,
  tracker: true,
  trackerOptions: true,
} satisfies Record<keyof PeekOptions, true>)

/** Peek options checked and with their defaults: what {@link peekOn} is given. */
export interface NormalizedPeekOptions {
  readonly commitOn: NonNullable<PeekOptions['commitOn']>
  readonly firstByteTimeoutMs: number
  readonly firstOutputTimeoutMs: number
  /** Undefined: the adapter's protocol decides. */
  readonly silenceTimeoutMs: number | undefined
  readonly clockStartedAt: number | undefined
  readonly maxPeekBytes: number
  readonly maxPeekFrames: number
  readonly tracker: PeekOptions['tracker']
  readonly trackerOptions: PeekOptions['trackerOptions']
}

/** Validates peek options and fills in their defaults; throws a `RangeError` naming a bad one. */
export function normalizePeekOptions(options: PeekOptions): NormalizedPeekOptions {
  countNormalization('peek')
  rejectUnknownKeys('peek', options, optionKeys)
  const commitOn = options.commitOn ?? peekDefaults.commitOn
  if (commitOn !== 'visible' && commitOn !== 'content' && commitOn !== 'first-frame') {
    throw new RangeError(
      `commitOn must be 'visible', 'content' or 'first-frame', got ${String(commitOn)}`,
    )
  }
  const firstByteTimeoutMs = timeoutMilliseconds(
    'firstByteTimeoutMs',
    options.firstByteTimeoutMs ?? peekDefaults.firstByteTimeoutMs,
  )
  const firstOutputTimeoutMs = timeoutMilliseconds(
    'firstOutputTimeoutMs',
    options.firstOutputTimeoutMs ?? peekDefaults.firstOutputTimeoutMs,
  )
  // Undefined: the adapter's protocol decides (see `silenceFor`).
  const silenceTimeoutMs =
    options.silenceTimeoutMs === undefined
      ? undefined
      : timeoutMilliseconds('silenceTimeoutMs', options.silenceTimeoutMs)
  const maxPeekBytes = options.maxPeekBytes ?? peekDefaults.maxPeekBytes
  const maxPeekFrames = options.maxPeekFrames ?? peekDefaults.maxPeekFrames
  positiveInteger('maxPeekBytes', maxPeekBytes)
  positiveInteger('maxPeekFrames', maxPeekFrames)
  const clockStartedAt = options.clockStartedAt
  if (clockStartedAt !== undefined && !Number.isFinite(clockStartedAt)) {
    throw new RangeError(
      `clockStartedAt must be a performance.now() time, got ${String(clockStartedAt)}`,
    )
  }
  return {
    commitOn,
    firstByteTimeoutMs,
    firstOutputTimeoutMs,
    silenceTimeoutMs,
    clockStartedAt,
    maxPeekBytes,
    maxPeekFrames,
    tracker: options.tracker,
    trackerOptions: options.trackerOptions,
  }
}

/** The silence bound for `adapter`: the one set, else the default where its protocol sends while thinking. */
function silenceFor(set: number | undefined, adapter: StreamAdapter): number {
  if (set !== undefined) return set
  return adapter.sendsWhileThinking === true
    ? peekDefaults.silenceTimeoutMs
    : Number.POSITIVE_INFINITY
}

/**
 * Arms the silence clock: it fires when the reader took no byte for `ms`. Each frame read
 * is `heard()`; bytes of a frame not yet whole are seen when the clock looks (then re-armed
 * for what is left), so no timer is set per byte.
 */
function watchSilence(
  reader: FrameReader,
  ms: number,
  arm: (delay: number, fire: () => void) => void,
  fire: () => void,
): { heard(): void } {
  let bytes = reader.bytesRead
  let since = now()
  const heard = () => {
    bytes = reader.bytesRead
    since = now()
  }
  if (ms === Number.POSITIVE_INFINITY) return { heard: () => {} }
  const look = () => {
    const at = now()
    if (reader.bytesRead !== bytes) {
      bytes = reader.bytesRead
      since = at
    }
    const left = since + ms - at
    if (left <= 0) fire()
    else arm(left, look)
  }
  arm(ms, look)
  return { heard }
}

/** The peek's outcome for each of its clocks. */
const peekTimeoutKinds: Partial<
  Record<
    StreamTimeoutError['timeout'],
    'first-byte-timeout' | 'first-output-timeout' | 'silence-timeout'
  >
> = {
  'first-byte': 'first-byte-timeout',
  'first-output': 'first-output-timeout',
  silence: 'silence-timeout',
}

/** Whether a verdict ends the peek under `commitOn`. */
function countsAsOutput(verdict: FrameVerdict, commitOn: CommitOn): boolean {
  switch (verdict.kind) {
    case 'text':
    case 'tool':
    case 'refusal':
      return true
    case 'reasoning':
      return commitOn !== 'content'
    case 'keepalive':
      return false
    default:
      return commitOn === 'first-frame'
  }
}

function terminalOf(verdict: FrameVerdict): boolean {
  return verdict.kind === 'terminal' || ('terminal' in verdict && verdict.terminal !== undefined)
}

/**
 * Reads frames through a tracker without writing anything downstream, until the first frame
 * that counts as output (per `commitOn`), a terminal frame, an error frame, EOF, a timeout,
 * an overflow or an abort. Never returns with half a frame consumed: a timeout mid-frame
 * leaves the partial bytes in the reader.
 *
 * @example
 * const outcome = await peekFirstOutput(reader, openaiChat, { firstOutputTimeoutMs: 20_000 })
 * if (outcome.kind === 'output') {
 *   // commit, write outcome.frames, then pump outcome.reader
 * } else {
 *   await outcome.reader.cancel()
 *   // retry: nothing reached the client
 * }
 *
 * @group Peek and classify
 */
export async function peekFirstOutput(
  reader: FrameReader,
  adapter: StreamAdapter,
  options: PeekOptions = {},
): Promise<PeekOutcome> {
  const stop = new AbortController()
  const outer = options.signal
  const onOuterAbort = () => stop.abort(outer?.reason)
  if (outer?.aborted) onOuterAbort()
  else outer?.addEventListener('abort', onOuterAbort, { once: true })
  try {
    return await peekOn(reader, adapter, normalizePeekOptions(options), stop)
  } finally {
    outer?.removeEventListener('abort', onOuterAbort)
  }
}

/**
 * {@link peekFirstOutput} on a controller of the caller's: the peek's timeouts abort `stop`,
 * and whatever else aborts it ends the peek as `aborted` (`options.signal` is not read). The
 * pump's `deliver` passes the one controller that already follows its signals: no second
 * signal and listener per attempt. With `clock` (the attempt's, running since it was sent and
 * stopping it), the first-byte and first-output bounds are the clock's: the peek sets no timer
 * of its own for them, and disposes of the clock when it ends.
 */
export async function peekOn(
  reader: FrameReader,
  adapter: StreamAdapter,
  options: NormalizedPeekOptions,
  stop: { readonly signal: SignalLike; abort(reason?: unknown): void },
  clock?: FirstOutputClock,
): Promise<PeekOutcome> {
  // Checked when it was built (`normalizePeekOptions`): never again per attempt (guarantee 30).
  const config = options
  const { commitOn, firstByteTimeoutMs, firstOutputTimeoutMs, maxPeekBytes, maxPeekFrames } = config
  const tracker = options.tracker ?? createStreamTracker(adapter, options.trackerOptions)
  const started = now()
  const frames: SseFrame[] = []
  let held = 0
  // Keep-alive comments are held (the bytes stay lossless) but never count as frames.
  let counted = 0
  const base = () => ({ frames, reader, tracker, elapsedMs: now() - started })

  const timers: ReturnType<typeof setTimeout>[] = []
  // Referenced timers: a script awaiting this request must not exit while it waits (guarantee 12 in docs/guarantees.md).
  const clockStartedAt = config.clockStartedAt ?? started
  const arm = (ms: number, fire: () => void) => {
    if (ms === Number.POSITIVE_INFINITY) return
    timers.push(setTimeout(fire, Math.max(0, ms - (started - clockStartedAt))))
  }
  const bytesAtStart = reader.bytesRead
  if (clock === undefined) {
    arm(firstByteTimeoutMs, () => {
      if (reader.bytesRead === bytesAtStart) {
        stop.abort(new StreamTimeoutError('first-byte', firstByteTimeoutMs))
      }
    })
    arm(firstOutputTimeoutMs, () => {
      stop.abort(new StreamTimeoutError('first-output', firstOutputTimeoutMs))
    })
  } else {
    clock.watchBytes(() => reader.bytesRead !== bytesAtStart)
  }
  const silence = silenceFor(config.silenceTimeoutMs, adapter)
  const silent = watchSilence(
    reader,
    silence,
    (delay, fire) => timers.push(setTimeout(fire, delay)),
    () => stop.abort(new StreamTimeoutError('silence', silence)),
  )

  try {
    for (;;) {
      let frame: SseFrame | null
      try {
        frame = await nextOn(reader, stop.signal)
      } catch (error) {
        if (stop.signal.aborted && error === stop.signal.reason) {
          if (error instanceof StreamTimeoutError) {
            const kind = peekTimeoutKinds[error.timeout] ?? 'first-output-timeout'
            return { ...base(), kind, error, partialFrameBytes: reader.bufferedBytes }
          }
          return { ...base(), kind: 'aborted', reason: error }
        }
        if (isFrameTooLargeError(error)) return { ...base(), kind: 'peek-overflow', error }
        if (isUpstreamReadError(error)) return { ...base(), kind: 'read-error', error }
        throw error
      }
      if (frame === null) {
        // No terminal, content or error frame was seen (each ends the peek): empty or thinking-only.
        const eof = classifyEof(tracker.state)
        return { ...base(), kind: eof.kind === 'thinking-only' ? 'thinking-only' : 'empty', eof }
      }
      silent.heard()
      frames.push(frame)
      held += frame.raw.length
      const verdict = tracker.observe(frame)
      if (verdict.kind !== 'keepalive') counted++
      if (verdict.kind === 'error') return { ...base(), kind: 'error-frame', error: verdict.error }
      if (countsAsOutput(verdict, commitOn)) {
        // Every request ends here: one literal, no spread.
        const elapsedMs = now() - started
        return { frames, reader, tracker, elapsedMs, kind: 'output', trigger: 'output', verdict }
      }
      if (terminalOf(verdict)) return { ...base(), kind: 'output', trigger: 'terminal', verdict }
      const bound =
        held > maxPeekBytes ? 'maxPeekBytes' : counted > maxPeekFrames ? 'maxPeekFrames' : undefined
      if (bound !== undefined) {
        // A live upstream sending frames that are not keep-alives is committed at the bound
        // (guarantee 27 in docs/guarantees.md): what it sends may be output no adapter knows
        // yet, and a retry would pay for all of it again and end the same way. Only a stream
        // of keep-alives alone overflows.
        if (counted > 0) return { ...base(), kind: 'output', trigger: 'bound', verdict }
        const limit = bound === 'maxPeekBytes' ? maxPeekBytes : maxPeekFrames
        return { ...base(), kind: 'peek-overflow', error: new PeekOverflowError(bound, limit) }
      }
    }
  } finally {
    for (const timer of timers) clearTimeout(timer)
    // Its timer stays for the pump's watchdog (one timer per attempt); the attempt clears it.
    clock?.handOver()
  }
}
