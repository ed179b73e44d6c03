/**
 * After commit: write the peeked frames, then every further frame as its exact bytes,
 * through the gate, and end honestly. Also the one-attempt composition `deliver()`.
 *
 * @module
 */

import {
  classifyEof,
  createStreamTracker,
  type EofClass,
  type StreamTracker,
} from '../classify/index.js'
import {
  type DownstreamClosedError,
  isDownstreamClosedError,
  isFrameTooLargeError,
  isUpstreamReadError,
  StreamTimeoutError,
} from '../errors.js'
import { followStops } from '../follow-signals.js'
import { positiveMilliseconds, rejectUnknownKeys, timeoutMilliseconds } from '../options.js'
import { type PeekOptions, type PeekOutcome, peekUntil } from '../peek/index.js'
import { joinBytes } from '../protocols/bytes.js'
import { errorBodyFor } from '../protocols/common.js'
import { redactValues } from '../protocols/sanitize.js'
import type {
  FrameVerdict,
  RenderableError,
  RenderState,
  StreamAdapter,
} from '../protocols/types.js'
import { FrameView, type SseFrame } from '../sse/frame.js'
import {
  createFrameReader,
  type FrameReader,
  type FrameSource,
  nextFrameOn,
  type RawFrameReader,
  rawFrameReader,
} from '../sse/reader.js'
import { FrameSplitter } from '../sse/splitter.js'
import { type SignalLike, Stop, stopOf } from '../stop.js'
import type { CommitGate } from './gate.js'
import {
  type AnyTranslator,
  type FrameTranslator,
  type ResponseTranslator,
  type StreamTranslator,
  startTranslator,
  type TranslatorRun,
} from './translator.js'

/**
 * How the pump ends a stream whose end was not clean.
 *
 * @group Downstream
 */
export interface PumpPolicy {
  /**
   * Output, then EOF without a terminal event: `error` writes the protocol's error frame
   * (honest); `synthesize-stop` writes a clean end.
   * @default 'error'
   */
  onPartialEof?: 'error' | 'synthesize-stop' | undefined
  /**
   * Reasoning only, then EOF: `error` writes an error frame; `promote-reasoning` writes the
   * reasoning as answer text, then a clean end.
   * @default 'error'
   */
  onThinkingOnly?: 'error' | 'promote-reasoning' | undefined
  /**
   * After commit, end the stream with an error frame when no frame other than a keep-alive
   * arrived for this long (keep-alives cannot hide a dead stream). Only time the pump was
   * ready to read counts: time waiting on a slow client never does, and the clock goes on
   * when the client took the bytes. `Infinity` turns it off; `0`, negatives and `NaN` are a
   * `RangeError`.
   * @default 300_000 (5 minutes: an upstream that sent only keep-alives for that long mid-answer
   *   is dead, and a client should not wait longer to learn it)
   * @example { idleTimeoutMs: 60_000 }
   */
  idleTimeoutMs?: number | undefined
  /**
   * End the stream when the client has not taken a write for this long (it stopped reading):
   * the response is cut, the upstream body cancelled, and the end is `downstream-stalled`, a
   * downstream failure that never counts against the upstream. Give the gate's
   * `writeStallTimeoutMs` the same value so its keep-alives are bounded too. `Infinity` turns
   * it off; `0`, negatives and `NaN` are a `RangeError`.
   * @default 60_000 (a minute without taking one byte is a client that stopped reading, and
   *   holding its upstream open longer only wastes the upstream's capacity)
   * @example { writeStallTimeoutMs: 30_000 }
   */
  writeStallTimeoutMs?: number | undefined
  /**
   * A gap between two frames longer than this counts as a stall in the outcome.
   * @default 2_000
   */
  stallThresholdMs?: number | undefined
}

/**
 * Defaults of {@link PumpPolicy}.
 *
 * @group Downstream
 */
export const pumpDefaults = Object.freeze({
  onPartialEof: 'error' as const,
  onThinkingOnly: 'error' as const,
  idleTimeoutMs: 300_000,
  writeStallTimeoutMs: 60_000,
  stallThresholdMs: 2_000,
})

/**
 * What a {@link DownstreamTransform} is handed with every frame: the same object all request long.
 *
 * @group Downstream
 */
export interface DownstreamTransformContext {
  /** The upstream's adapter (what the frames are). */
  readonly upstream: StreamAdapter
  /** The translator's own state for this request (ids, open blocks…); starts empty. */
  readonly state: Record<string, unknown>
}

/**
 * A gateway's translator from upstream frames to the client's protocol: the bytes (or text) to
 * write for one upstream frame, or `null` to drop it. It sees every upstream frame that is not
 * a keep-alive, in order, and never a frame the library writes itself.
 *
 * @group Downstream
 */
export type DownstreamTransform = (
  frame: SseFrame,
  context: DownstreamTransformContext,
) => Uint8Array | string | null

/**
 * The client's side, when it speaks another protocol than the upstream or frames are rewritten.
 *
 * @group Downstream
 */
export interface DownstreamOptions {
  /**
   * The client's protocol: renders every frame the library writes (honest error, synthesized
   * stop, promoted reasoning, the error body before content) and tracks the frames written,
   * so those renderings fit what the client already got.
   * @default the upstream's adapter
   */
  readonly adapter?: StreamAdapter | undefined
  /** The translator for upstream frames, one frame at a time (see {@link DownstreamTransform}). */
  readonly transform?: DownstreamTransform | undefined
  /**
   * A translator over the whole stream, as an async function over the committed frames
   * (see {@link FrameTranslator}). Needs `adapter` (the client's protocol). At most one of
   * `transform`, `translateFrames`, `translateStream` and `translateResponse`.
   */
  readonly translateFrames?: FrameTranslator | undefined
  /** A translator as a fresh `TransformStream` per request (see {@link StreamTranslator}). Needs `adapter`. */
  readonly translateStream?: StreamTranslator | undefined
  /** A translator from `Response` to `Response` (see {@link ResponseTranslator}). Needs `adapter`. */
  readonly translateResponse?: ResponseTranslator | undefined
  /**
   * Where SSE comments `: keep-alive` are written to the client: `'before-content'` only
   * between early headers and the first content (when the client otherwise hears nothing);
   * `true` also after content; `false` never. After content the upstream's own frames set
   * the pace, and a translator downstream of the relay that parses every frame as an event
   * of its protocol can choke on a comment, so by default none is written there.
   * @default 'before-content'
   */
  readonly keepAlive?: boolean | 'before-content' | undefined
}

/**
 * Why the pump wrote an error frame itself.
 *
 * @group Downstream
 */
export type PumpErrorCause =
  | 'partial-eof'
  /** The upstream's body ended (cleanly) inside a frame after output: a cut, told as one. */
  | 'eof-mid-frame'
  | 'thinking-only'
  | 'empty'
  | 'read-error'
  | 'idle-timeout'
  | 'frame-too-large'

/**
 * How a pumped stream ended. A discriminated union on `kind`.
 *
 * @group Downstream
 */
export type PumpEnd =
  | { readonly kind: 'completed' }
  | { readonly kind: 'upstream-error' }
  | { readonly kind: 'stop-synthesized' }
  | { readonly kind: 'reasoning-promoted' }
  | {
      readonly kind: 'error-written'
      readonly cause: PumpErrorCause
      readonly error: RenderableError
    }
  /** The client left: the sink failed or closed under a write. */
  | { readonly kind: 'client-gone'; readonly error: DownstreamClosedError }
  /** The client took no bytes for `writeStallTimeoutMs`: cut, and not the upstream's fault. */
  | { readonly kind: 'downstream-stalled'; readonly error: StreamTimeoutError }
  /**
   * The host's own `signal` fired: the host gave up on the stream (a shutdown, its own
   * deadline). A departed client is `client-gone`, never this.
   */
  | { readonly kind: 'aborted'; readonly reason: unknown }

/** The frames' bytes as one array: a view when they lie side by side in one chunk. */
function joinRaw(frames: readonly SseFrame[]): Uint8Array {
  const first = (frames[0] as SseFrame).raw
  let length = 0
  let adjacent = true
  let offset = first.byteOffset
  for (const { raw } of frames) {
    adjacent &&= raw.buffer === first.buffer && raw.byteOffset === offset
    offset += raw.length
    length += raw.length
  }
  if (adjacent) return new Uint8Array(first.buffer, first.byteOffset, length)
  const out = new Uint8Array(length)
  let at = 0
  for (const { raw } of frames) {
    out.set(raw, at)
    at += raw.length
  }
  return out
}

/**
 * Gaps between upstream frames after commit.
 *
 * @group Downstream
 */
export interface StallStats {
  readonly count: number
  readonly totalMs: number
  readonly longestMs: number
  readonly thresholdMs: number
}

/**
 * What {@link pump} reports.
 *
 * @group Downstream
 */
export interface PumpOutcome {
  readonly end: PumpEnd
  /** The EOF class, when the upstream reached EOF. */
  readonly eof: EofClass | null
  /** Frames written (peeked ones included, rendered ones excluded). */
  readonly frames: number
  /** Content bytes written downstream by this pump. */
  readonly bytes: number
  readonly stalls: StallStats
  readonly durationMs: number
}

/**
 * Options of {@link pump}.
 *
 * @group Downstream
 */
export interface PumpOptions extends PumpPolicy {
  readonly gate: CommitGate
  /** The frames peek consumed (written first, in order). */
  readonly frames: readonly SseFrame[]
  /** The reader peek handed on. */
  readonly reader: FrameReader
  /** The tracker that observed the peeked frames. */
  readonly tracker: StreamTracker
  /** Rewrites a frame's bytes before they are written (`null` drops the frame). */
  readonly transform?: ((frame: SseFrame) => Uint8Array | null) | undefined
  /** The client's protocol and translator, when they differ from the upstream's. */
  readonly downstream?: DownstreamOptions | undefined
  /** Aborting ends the pump (the host gave up); the upstream is cancelled. */
  readonly signal?: AbortSignal | undefined
  /**
   * Credentials to redact by exact value from the upstream's error frames relayed after
   * commit (`relay()` passes the request's keys): an error that quotes the key never reaches
   * the client.
   */
  readonly secrets?: readonly string[] | undefined
}

const now = (): number => performance.now()

/** Validates a pump policy and fills in its defaults; throws a `RangeError` naming a bad option. */
export function normalizePumpPolicy(policy: PumpPolicy) {
  const idleTimeoutMs = timeoutMilliseconds(
    'idleTimeoutMs',
    policy.idleTimeoutMs ?? pumpDefaults.idleTimeoutMs,
  )
  const writeStallTimeoutMs = timeoutMilliseconds(
    'writeStallTimeoutMs',
    policy.writeStallTimeoutMs ?? pumpDefaults.writeStallTimeoutMs,
  )
  const stallThresholdMs = positiveMilliseconds(
    'stallThresholdMs',
    policy.stallThresholdMs ?? pumpDefaults.stallThresholdMs,
  )
  return {
    onPartialEof: policy.onPartialEof ?? pumpDefaults.onPartialEof,
    onThinkingOnly: policy.onThinkingOnly ?? pumpDefaults.onThinkingOnly,
    idleTimeoutMs,
    writeStallTimeoutMs,
    stallThresholdMs,
  }
}

/**
 * The pump's two clocks on one referenced timer (invariants 12 and 14). Upstream silence
 * counts only while the pump is ready to read: time blocked on a write the client has not
 * taken is subtracted, and that time counts toward the write-stall bound instead.
 */
class Watchdog {
  readonly #idleMs: number
  readonly #stallMs: number
  readonly #onIdle: (error: StreamTimeoutError) => void
  #timer: ReturnType<typeof setTimeout> | undefined
  /** When `#timer` fires (`now()` time). */
  #due = 0
  #stopped = false
  /** When the last frame other than a keep-alive arrived. */
  #lastActivity = now()
  /** Time blocked on writes since then. */
  #blockedMs = 0
  #writingSince: number | undefined
  #failWrite: ((reason: unknown) => void) | undefined

  constructor(idleMs: number, stallMs: number, onIdle: (error: StreamTimeoutError) => void) {
    this.#idleMs = idleMs
    this.#stallMs = stallMs
    this.#onIdle = onIdle
    this.#arm()
  }

  /** A frame other than a keep-alive arrived: the upstream is alive. */
  activity(at: number): void {
    this.#lastActivity = at
    this.#blockedMs = 0
  }

  /** Ends a blocked write now (the host gave up): it rejects with `reason`. */
  interrupt(reason: unknown): void {
    this.#failWrite?.(reason)
  }

  /** Waits for a write the client has not taken yet; rejects with `write-stall` past the bound. */
  async blocked(written: Promise<void>): Promise<void> {
    this.#writingSince = now()
    try {
      await new Promise<void>((resolve, reject) => {
        this.#failWrite = reject
        written.then(resolve, reject)
      })
    } finally {
      this.#blockedMs += now() - this.#writingSince
      this.#writingSince = undefined
      this.#failWrite = undefined
      // The idle clock goes on from here, its deadline moved by the time spent blocked. The
      // armed timer stays when it fires no later than that (a check that fires early
      // re-arms): no new timer per blocked write.
      this.#arm(true)
    }
  }

  stop(): void {
    this.#stopped = true
    clearTimeout(this.#timer)
    this.#timer = undefined
  }

  /**
   * Re-arms lazily for the nearest bound that could fire; none when both are off. With
   * `keepEarlier`, a timer already due no later than that bound stays.
   */
  #arm(keepEarlier = false): void {
    if (this.#stopped) return
    const at = now()
    let delay: number
    if (this.#writingSince !== undefined) {
      delay = this.#stallMs - (at - this.#writingSince)
    } else {
      const quiet = at - this.#lastActivity - this.#blockedMs
      // Never sleep past a stall bound: a write may start blocking at any moment.
      delay = Math.min(this.#idleMs - quiet, this.#stallMs)
    }
    if (delay === Number.POSITIVE_INFINITY) return
    const due = at + Math.max(delay, 1)
    if (keepEarlier && this.#timer !== undefined && this.#due <= due) return
    clearTimeout(this.#timer)
    this.#due = due
    this.#timer = setTimeout(this.#check, due - at)
  }

  readonly #check = (): void => {
    this.#timer = undefined
    const at = now()
    if (this.#writingSince !== undefined) {
      if (at - this.#writingSince >= this.#stallMs) {
        this.#failWrite?.(new StreamTimeoutError('write-stall', this.#stallMs))
        return
      }
    } else if (at - this.#lastActivity - this.#blockedMs >= this.#idleMs) {
      this.#onIdle(new StreamTimeoutError('idle', this.#idleMs))
      return
    }
    this.#arm()
  }
}

/** The write-stall error carried by a gate failure (the gate's own keep-alive stalled). */
function stallOf(error: unknown): StreamTimeoutError | undefined {
  const found = isDownstreamClosedError(error) ? error.cause : error
  return found instanceof StreamTimeoutError && found.timeout === 'write-stall' ? found : undefined
}

const endMessages = {
  'partial-eof': 'The upstream stream ended before its final event; the answer is incomplete',
  'thinking-only': 'The upstream sent reasoning but no answer before the stream ended',
  empty: 'The upstream stream ended without any output',
  'read-error': 'The connection to the upstream was lost mid-stream; the answer is incomplete',
  'eof-mid-frame':
    "The upstream's stream ended in the middle of an event; the answer is incomplete",
  'frame-too-large': 'The upstream sent a frame larger than the relay accepts',
} as const

/** How the pump's endings write: rendered bytes the tracker also sees, and a bounded close. */
interface EndingWriter {
  rendered(bytes: Uint8Array): Promise<void>
  close(): Promise<void>
  /** The client's adapter, and what it has been sent so far. */
  readonly adapter: StreamAdapter
  state(): RenderState
}

async function writeError(
  out: EndingWriter,
  cause: PumpErrorCause,
  error: RenderableError,
): Promise<PumpEnd> {
  await out.rendered(out.adapter.renderError(error, out.state()))
  await out.close()
  return { kind: 'error-written', cause, error }
}

/** The end at upstream EOF, decided by its class and the policy; never a fake success. */
async function endAtEof(
  out: EndingWriter,
  tracker: StreamTracker,
  eof: EofClass,
  policy: {
    onPartialEof: 'error' | 'synthesize-stop'
    onThinkingOnly: 'error' | 'promote-reasoning'
  },
  cut: boolean,
): Promise<PumpEnd> {
  const { state } = tracker
  const upstreamError = (cause: 'partial-eof' | 'eof-mid-frame' | 'thinking-only' | 'empty') =>
    writeError(out, cause, { type: 'upstream_error', message: endMessages[cause] })
  // Output, then the body ended inside an event: tokens were lost, whatever the policy says
  // of a stream that merely stopped between events. After the terminal the answer was whole.
  if (cut && eof.kind !== 'completed' && eof.kind !== 'empty') return upstreamError('eof-mid-frame')
  switch (eof.kind) {
    case 'completed':
      await out.close()
      return { kind: 'completed' }
    case 'error-only':
      // The upstream's own error frame already went out, in its protocol.
      await out.close()
      return { kind: 'upstream-error' }
    case 'partial':
      if (state.errors > 0) {
        await out.close()
        return { kind: 'upstream-error' }
      }
      if (policy.onPartialEof !== 'synthesize-stop') return upstreamError('partial-eof')
      await out.rendered(out.adapter.renderStop(out.state()))
      await out.close()
      return { kind: 'stop-synthesized' }
    case 'thinking-only':
      if (policy.onThinkingOnly !== 'promote-reasoning') return upstreamError('thinking-only')
      await out.rendered(out.adapter.renderReasoningAsText(out.state()))
      await out.rendered(out.adapter.renderStop(out.state()))
      await out.close()
      return { kind: 'reasoning-promoted' }
    case 'empty':
      return upstreamError('empty')
  }
}

/** The end after a read threw: a watchdog, the client, the host, or the upstream itself. */
async function endAfterReadFailure(
  error: unknown,
  stop: SignalLike,
  reader: FrameReader,
  tracker: StreamTracker,
  out: EndingWriter,
  atEof: () => Promise<PumpEnd>,
): Promise<PumpEnd> {
  const stopped = stop.aborted && error === stop.reason
  const downstreamGone = stopped && !(error instanceof StreamTimeoutError)
  // After the upstream's terminal event the answer is whole: a late stall or break ends it cleanly.
  if (tracker.state.terminalSeen && !downstreamGone) {
    if (!isUpstreamReadError(error)) await reader.cancel(error)
    return atEof()
  }
  if (stopped) {
    if (error instanceof StreamTimeoutError) {
      return writeError(out, 'idle-timeout', { type: 'timeout', message: error.message })
    }
    if (isDownstreamClosedError(error)) {
      const stalled = stallOf(error)
      return stalled === undefined
        ? { kind: 'client-gone', error }
        : { kind: 'downstream-stalled', error: stalled }
    }
    return { kind: 'aborted', reason: error }
  }
  if (isUpstreamReadError(error)) {
    return writeError(out, 'read-error', {
      type: 'upstream_error',
      message: endMessages['read-error'],
    })
  }
  if (isFrameTooLargeError(error)) {
    return writeError(out, 'frame-too-large', {
      type: 'upstream_error',
      message: endMessages['frame-too-large'],
    })
  }
  throw error
}

/** Releases the upstream on every end, and cuts the client when the end is not a clean one. */
async function release(end: PumpEnd, reader: FrameReader, gate: CommitGate): Promise<void> {
  if (end.kind === 'client-gone' || end.kind === 'aborted') {
    await reader.cancel(end.kind === 'client-gone' ? end.error : end.reason)
    if (end.kind === 'aborted') gate.abort(end.reason)
  } else if (end.kind === 'downstream-stalled') {
    // Cut the client first: the upstream's cancel may take a round trip.
    gate.abort(end.error)
    await reader.cancel(end.error)
  } else if (!reader.done) {
    await reader.cancel()
  }
}

const textEncoder = new TextEncoder()
/** The client tracker's frame bound: a translator's frames are the gateway's own, not untrusted. */
const clientFrameBytes = 16 * 1024 * 1024

/** How upstream frames become the client's bytes, and what the client was sent so far. */
interface FrameEncoder {
  /** Frames go out as their exact bytes: a batch may be one write. */
  readonly raw: boolean
  /** The bytes for one upstream frame (`null`: nothing); `kind` is its verdict, when known. */
  encode(frame: SseFrame, kind: FrameVerdict['kind'] | undefined): Uint8Array | null
  /** Sees the bytes of a library-rendered frame. */
  sent(bytes: Uint8Array): void
  /** Sees the bytes of a batch written as it came (only a client tracker needs them). */
  sentRaw(bytes: Uint8Array): void
  readonly adapter: StreamAdapter
  state(): RenderState
  /** Whether the client was sent its protocol's final event or an error event. */
  clientEnded(): boolean
}

/**
 * With a downstream side, a second tracker over the client's adapter observes every frame
 * written, so library-rendered frames continue what the client got (its ids, model, open
 * blocks) rather than what the upstream sent. The reasoning to promote is the upstream's.
 */
function createFrameEncoder(
  options: Pick<PumpOptions, 'tracker' | 'transform' | 'downstream'>,
): FrameEncoder {
  const { tracker, transform, downstream } = options
  const upstream = tracker.adapter
  const translate = downstream?.transform
  const whole = wholeStreamTranslator(downstream) !== undefined
  if (downstream?.adapter === undefined && translate === undefined && !whole) {
    return {
      raw: transform === undefined,
      encode: (frame) => (transform === undefined ? frame.raw : transform(frame)),
      sent: (bytes) => observeBytes(new FrameSplitter(Math.max(bytes.length, 1)), tracker, bytes),
      sentRaw: () => {},
      adapter: upstream,
      state: () => tracker.state,
      clientEnded: () => tracker.state.terminalSeen || tracker.state.errors > 0,
    }
  }
  const adapter = downstream?.adapter ?? upstream
  const client = createStreamTracker(adapter)
  const splitter = new FrameSplitter(clientFrameBytes)
  const context: DownstreamTransformContext = Object.freeze({ upstream, state: {} })
  const sent = (bytes: Uint8Array) => observeBytes(splitter, client, bytes)
  return {
    raw: translate === undefined && transform === undefined && !whole,
    encode(frame, kind) {
      let bytes: Uint8Array | null
      if (translate === undefined) bytes = transform === undefined ? frame.raw : transform(frame)
      else {
        // Keep-alives are the relay's business, never the translator's.
        if ((kind ?? upstream.inspect(frame).kind) === 'keepalive') return null
        const out = translate(frame, context)
        bytes = typeof out === 'string' ? textEncoder.encode(out) : out
      }
      if (bytes !== null) sent(bytes)
      return bytes
    },
    sent,
    sentRaw: sent,
    adapter,
    state: () => ({ ...client.state, reasoningText: tracker.state.reasoningText }),
    clientEnded: () => client.state.terminalSeen || client.state.errors > 0,
  }
}

/** Starts the whole-stream translator `options.downstream` names, if any. */
function startWholeStream(
  options: Pick<PumpOptions, 'tracker' | 'downstream'>,
  encoder: FrameEncoder,
  send: (bytes: Uint8Array) => Promise<void>,
): TranslatorRun | undefined {
  const translator = wholeStreamTranslator(options.downstream)
  if (translator === undefined) return undefined
  const context = Object.freeze({ upstream: options.tracker.adapter, client: encoder.adapter })
  return startTranslator(translator, context, async (bytes) => {
    encoder.sent(bytes)
    await send(bytes)
  })
}

/** Waits for `waiting`, or rejects with the stop's reason when it fires first. */
function raceStop(waiting: Promise<void>, stop: Stop): Promise<void> {
  if (stop.aborted) return Promise.reject(stop.reason)
  return new Promise((resolve, reject) => {
    const onStop = () => reject(stop.reason)
    stop.addEventListener('abort', onStop)
    waiting.then(
      () => {
        stop.removeEventListener('abort', onStop)
        resolve()
      },
      (error: unknown) => {
        stop.removeEventListener('abort', onStop)
        reject(error)
      },
    )
  })
}

/** The whole-stream translator `downstream` names, if any. */
export function wholeStreamTranslator(
  downstream: DownstreamOptions | undefined,
): AnyTranslator | undefined {
  if (downstream === undefined) return undefined
  if (downstream.translateFrames !== undefined)
    return { kind: 'frames', translate: downstream.translateFrames }
  if (downstream.translateStream !== undefined)
    return { kind: 'stream', translate: downstream.translateStream }
  if (downstream.translateResponse !== undefined)
    return { kind: 'response', translate: downstream.translateResponse }
  return undefined
}

/** A frame as the client may see it: its bytes with secrets redacted (a new frame only then). */
function redactedFrame(frame: SseFrame, secrets: readonly string[]): SseFrame {
  const bytes = redactBytes(frame.raw, secrets)
  if (bytes === frame.raw) return frame
  const splitter = new FrameSplitter(bytes.length + 2)
  splitter.push(bytes)
  return splitter.take() ?? splitter.finish() ?? frame
}

function observeBytes(splitter: FrameSplitter, tracker: StreamTracker, bytes: Uint8Array): void {
  splitter.push(bytes)
  for (let frame = splitter.take(); frame !== null; frame = splitter.take()) tracker.observe(frame)
}

/**
 * A write of frames as they came, and what is left to wait for: `undefined` when the sink
 * took the bytes at once (most writes), so the pump's loop takes no promise hop for it. A
 * blocked write is timed by the watchdog.
 */
function pushRaw(
  bytes: Uint8Array,
  gate: CommitGate,
  encoder: FrameEncoder,
  watchdog: Watchdog,
): Promise<void> | undefined {
  encoder.sentRaw(bytes)
  const written = gate.write(bytes)
  if (gate.writePending) return watchdog.blocked(written)
  return gate.failure === undefined ? undefined : written
}

const lf = 0x0a

/**
 * A last frame the end of the body cut before its blank line, made whole: its bytes with the
 * line ends it lacked, when what it holds still reads as a frame (a sloppy upstream that
 * left off the final blank line); `null` when the cut fell inside it (its data no longer
 * parses): such a frame is dropped, never written glued to what follows.
 */
function terminatedFrame(frame: SseFrame, adapter: StreamAdapter): SseFrame | null {
  let verdict: FrameVerdict
  try {
    verdict = adapter.inspect(frame)
  } catch {
    return null
  }
  if (verdict.kind === 'error' && verdict.error.code === 'MALFORMED_FRAME') return null
  const { raw } = frame
  const last = raw[raw.length - 1]
  const tail = last === lf ? [lf] : [lf, lf]
  const bytes = new Uint8Array(raw.length + tail.length)
  bytes.set(raw)
  bytes.set(tail, raw.length)
  const splitter = new FrameSplitter(bytes.length)
  splitter.push(bytes)
  return splitter.take() ?? splitter.finish()
}

/** Bytes with every secret redacted by value; the same bytes when none is in them. */
function redactBytes(bytes: Uint8Array, secrets: readonly string[]): Uint8Array {
  const text = utf8.decode(bytes)
  const redacted = redactValues(text, secrets)
  return redacted === text ? bytes : textEncoder.encode(redacted)
}

const utf8 = new TextDecoder()

/** Writes spans one after another, each once the sink took the one before. */
async function pushSpans(
  spans: readonly Uint8Array[],
  gate: CommitGate,
  encoder: FrameEncoder,
  watchdog: Watchdog,
): Promise<void> {
  for (const span of spans) {
    const written = pushRaw(span, gate, encoder, watchdog)
    if (written !== undefined) await written
  }
}

/**
 * The view every pump's hot path asks its questions through: it is pointed at a frame and
 * read in the same synchronous step, so one serves all pumps (no object per stream).
 */
const view = new FrameView()

/** Counts a gap between two upstream frames as a stall when it passes the threshold. */
function recordGap(
  stalls: { count: number; totalMs: number; longestMs: number; thresholdMs: number },
  gap: number,
): void {
  if (gap <= stalls.thresholdMs) return
  stalls.count++
  stalls.totalMs += gap
  stalls.longestMs = Math.max(stalls.longestMs, gap)
}

/**
 * The frame just read and those that came in the same upstream chunk, observed in order: they
 * go out in one write, as a byte pipe's would. `alive` runs for each frame not a keep-alive.
 */
function takeBatch(
  first: SseFrame,
  reader: FrameReader,
  tracker: StreamTracker,
  watchdog: Watchdog,
  arrived: number,
): { batch: SseFrame[]; kinds: FrameVerdict['kind'][] } {
  const batch: SseFrame[] = []
  const kinds: FrameVerdict['kind'][] = []
  for (let frame: SseFrame | null = first; frame !== null; ) {
    const kind = tracker.observeCommitted(frame)
    if (kind !== 'keepalive') watchdog.activity(arrived)
    batch.push(frame)
    kinds.push(kind)
    try {
      frame = reader.takeBuffered()
    } catch {
      // The reader keeps the failure: the next read reports it, after this batch is out.
      frame = null
    }
  }
  return { batch, kinds }
}

/**
 * What stops a pump: the client leaving (the gate's signal), the host's signal, and the
 * watchdog's idle and write-stall clocks, all aborting `stop`. `release` stops the watchdog
 * and removes the listeners.
 */
function watchPump(
  gate: CommitGate,
  signal: SignalLike | undefined,
  policy: ReturnType<typeof normalizePumpPolicy>,
) {
  const stop = new Stop()
  const watchdog = new Watchdog(policy.idleTimeoutMs, policy.writeStallTimeoutMs, (error) =>
    stop.abort(error),
  )
  const gone = stopOf(gate)
  const onGateAbort = () => stop.abort(gone.reason)
  const onHostAbort = () => {
    stop.abort(signal?.reason)
    // The host gave up: do not wait for a slow client to take a write first.
    watchdog.interrupt(signal?.reason)
  }
  // A relay with no host signal of its own passes the gate's: one listener then, the host's.
  const watched: (readonly [SignalLike | undefined, () => void])[] =
    signal === gone ? [] : [[gone, onGateAbort]]
  watched.push([signal, onHostAbort])
  for (const [target, listener] of watched) {
    if (target?.aborted) listener()
    else target?.addEventListener('abort', listener, { once: true })
  }
  return {
    stop,
    watchdog,
    release() {
      watchdog.stop()
      for (const [target, listener] of watched) target?.removeEventListener('abort', listener)
    },
  }
}

/**
 * Pumps a committed stream to its end: the peeked frames, then every further frame as its
 * exact bytes, through the gate. At EOF, `classifyEof` decides: `completed` closes;
 * `partial` and `thinking-only` follow the policy; anything abnormal is written as the
 * protocol's own error frame, never as a fake success. A downstream failure cancels the
 * upstream and stops reading. The upstream body is always released and every timer cleared.
 *
 * @group Downstream
 */
export function pump(options: PumpOptions): Promise<PumpOutcome> {
  return pumpWith(options, normalizePumpPolicy(options))
}

/** What the library itself hands the pump: its signal may be a library-made stop. */
type PumpInput = Omit<PumpOptions, 'signal'> & { readonly signal?: SignalLike | undefined }

/** {@link pump} with its policy already checked (`deliver` checks it before the peek). */
async function pumpWith(
  options: PumpInput,
  policy: ReturnType<typeof normalizePumpPolicy>,
): Promise<PumpOutcome> {
  const { gate, reader, tracker } = options
  const encoder = createFrameEncoder(options)
  const started = now()
  let frames = 0
  const bytesAtStart = gate.bytesWritten
  const stalls = { count: 0, totalMs: 0, longestMs: 0, thresholdMs: policy.stallThresholdMs }
  let eof: EofClass | null = null

  const { stop, watchdog, release: unwatch } = watchPump(gate, options.signal, policy)

  /** Every downstream write goes through here: a blocked one is timed by the watchdog. */
  const send = (written: Promise<void>): Promise<void> =>
    gate.writePending ? watchdog.blocked(written) : written

  const secrets =
    options.secrets !== undefined && options.secrets.length > 0 ? options.secrets : undefined
  const translator = startWholeStream(options, encoder, (bytes) => send(gate.write(bytes)))
  const write = async (frame: SseFrame, kind?: FrameVerdict['kind']) => {
    if (translator !== undefined) {
      // Keep-alives are the relay's business, never the translator's; an error frame may
      // quote a key, so the translator gets it redacted.
      const seen = kind ?? tracker.adapter.inspect(frame).kind
      frames++
      if (seen === 'keepalive') return
      const given =
        seen === 'error' && secrets !== undefined ? redactedFrame(frame, secrets) : frame
      const waiting = translator.push(given)
      if (waiting !== undefined) await raceStop(waiting, stop)
      return
    }
    let bytes = encoder.encode(frame, kind)
    if (kind === 'error' && bytes !== null && secrets !== undefined)
      bytes = redactBytes(bytes, secrets)
    if (bytes !== null && bytes.length > 0) await send(gate.write(bytes))
    frames++
  }

  /**
   * Writes library-rendered bytes and lets the client's tracker see them, so its state stays
   * true. A translator's input fails first, and all it wrote goes out before them.
   */
  const writeRendered = async (bytes: Uint8Array) => {
    await translator?.finish('fail')
    encoder.sent(bytes)
    await send(gate.write(bytes))
  }

  /**
   * Closing waits for the client to take what is buffered, so it is bounded the same way. A
   * translator's input ends first and all it wrote goes out; when what it wrote has no final
   * event of the client's protocol, the ending is the protocol's error, never a clean close.
   */
  const close = async () => {
    if (translator !== undefined) {
      await translator.finish('end')
      if (!encoder.clientEnded()) {
        const bytes = encoder.adapter.renderError(
          {
            type: 'upstream_error',
            message: 'the translator ended the stream without its final event',
          },
          encoder.state(),
        )
        encoder.sent(bytes)
        await send(gate.write(bytes))
      }
    }
    await watchdog.blocked(gate.close())
  }

  const out: EndingWriter = {
    rendered: writeRendered,
    close,
    adapter: encoder.adapter,
    state: encoder.state,
  }
  const atEof = (cut = false): Promise<PumpEnd> => {
    eof = classifyEof(tracker.state)
    return endAtEof(out, tracker, eof, policy, cut)
  }

  /**
   * The hot path, for frames relayed as their bytes from a reader this library made: the
   * frames of one upstream chunk, as bytes seen through a reused view (no object per frame),
   * observed in order and written as one span of the chunk. Returns what is left to wait
   * for, or `undefined` when the sink took the bytes at once: no promise hop per chunk then.
   */
  const relayChunk = (fast: RawFrameReader, first: Uint8Array): Promise<void> | undefined => {
    const arrived = now()
    recordGap(stalls, arrived - previous)
    previous = arrived
    let alive = false
    let errors = false
    let span = first
    let length = 0
    /** Spans before `span`: only when a frame that spanned chunks was copied. */
    let before: Uint8Array[] | undefined
    for (let raw: Uint8Array | null = first; raw !== null; ) {
      const kind = tracker.observeCommitted(view.point(raw))
      if (kind !== 'keepalive') alive = true
      if (kind === 'error') errors = true
      frames++
      if (length === 0 && raw === span) {
        // The chunk's first frame (often its only one): nothing to compare.
        length = raw.length
      } else if (raw.buffer === span.buffer && raw.byteOffset === span.byteOffset + length) {
        length += raw.length
      } else {
        before ??= []
        before.push(new Uint8Array(span.buffer, span.byteOffset, length))
        span = raw
        length = raw.length
      }
      try {
        raw = fast.takeBufferedRaw()
      } catch {
        // The reader keeps the failure: the next read reports it, after these frames are out.
        raw = null
      }
    }
    if (alive) watchdog.activity(arrived)
    const last =
      length === span.length ? span : new Uint8Array(span.buffer, span.byteOffset, length)
    if (errors && secrets !== undefined) {
      // An error frame may quote a key: the chunk goes out whole, redacted (rare, so a copy).
      return pushRaw(
        redactBytes(joinBytes([...(before ?? []), last]), secrets),
        gate,
        encoder,
        watchdog,
      )
    }
    if (before === undefined) return pushRaw(last, gate, encoder, watchdog)
    before.push(last)
    return pushSpans(before, gate, encoder, watchdog)
  }

  let previous = 0
  const run = async (): Promise<PumpEnd> => {
    for (const frame of options.frames) {
      // A peeked frame the body's end cut (the last one) goes out whole, or not at all.
      const whole = frame.terminated ? frame : terminatedFrame(frame, tracker.adapter)
      if (whole !== null) await write(whole)
    }
    previous = now()
    const fast = encoder.raw ? rawFrameReader(reader) : undefined
    if (fast !== undefined) {
      // The hot path: the reader hands each chunk's frames over where the chunk lands.
      let ended: { readonly failed: unknown } | null
      try {
        ended = await fast.pumpRaw(stop, (raw) => relayChunk(fast, raw))
      } catch (error) {
        return endAfterReadFailure(error, stop, reader, tracker, out, atEof)
      }
      if (ended !== null) throw ended.failed
    }
    // At the upstream's end the hot path hands over: a last frame may be one the end cut.
    for (;;) {
      let frame: SseFrame | null
      try {
        frame = await nextFrameOn(reader, stop)
      } catch (error) {
        return endAfterReadFailure(error, stop, reader, tracker, out, atEof)
      }
      // A last frame the body's end cut goes out whole, or not at all (a cut, told).
      const whole =
        frame === null || frame.terminated ? frame : terminatedFrame(frame, tracker.adapter)
      if (whole === null) return atEof(frame !== null)
      frame = whole
      const arrived = now()
      recordGap(stalls, arrived - previous)
      previous = arrived
      const { batch, kinds } = takeBatch(frame, reader, tracker, watchdog, arrived)
      if (batch.length === 1 || !encoder.raw) {
        for (let index = 0; index < batch.length; index++) {
          await write(batch[index] as SseFrame, kinds[index])
        }
      } else {
        let joined = joinRaw(batch)
        if (secrets !== undefined && kinds.includes('error')) joined = redactBytes(joined, secrets)
        encoder.sentRaw(joined)
        await send(gate.write(joined))
        frames += batch.length
      }
    }
  }

  let end: PumpEnd
  try {
    end = await run()
  } catch (error) {
    translator?.abort(error)
    const stalled = stallOf(error)
    if (stalled !== undefined) end = { kind: 'downstream-stalled', error: stalled }
    else if (isDownstreamClosedError(error)) end = { kind: 'client-gone', error }
    else if (options.signal?.aborted && error === options.signal.reason) {
      end = { kind: 'aborted', reason: error }
    } else {
      // Code that threw (a transform, an adapter): the upstream is released all the same.
      await reader.cancel(error).catch(() => {})
      throw error
    }
  } finally {
    unwatch()
  }
  await release(end, reader, gate)
  return {
    end,
    eof,
    frames,
    bytes: gate.bytesWritten - bytesAtStart,
    stalls: { ...stalls },
    durationMs: now() - started,
  }
}

/**
 * Ends a request that failed before content: with a real status and the protocol's JSON
 * error body while headers are uncommitted, else in-band with the protocol's error frame.
 *
 * @group Downstream
 */
export async function failBeforeContent(
  gate: CommitGate,
  adapter: StreamAdapter,
  status: number,
  error: RenderableError,
  headers?: HeadersInit,
): Promise<void> {
  if (gate.state === 'closed') return
  if (gate.state === 'open') {
    await gate.respond(status, errorBodyFor(adapter, { status, ...error }), headers)
    return
  }
  await gate.write(adapter.renderError(error))
  await gate.close()
}

/**
 * Options of {@link deliver}.
 *
 * @group Downstream
 */
export interface DeliverOptions extends PumpPolicy {
  readonly gate: CommitGate
  /** The upstream body, or a reader over it. */
  readonly body: FrameSource | FrameReader
  readonly adapter: StreamAdapter
  /** Peek options (the signal is `signal`). */
  readonly peek?: Omit<PeekOptions, 'signal'> | undefined
  /** Options of the frame reader created over `body`. */
  readonly maxFrameBytes?: number | undefined
  /** Rewrites a frame's bytes before they are written (`null` drops the frame). */
  readonly transform?: ((frame: SseFrame) => Uint8Array | null) | undefined
  /** The client's protocol and translator, when they differ from the upstream's. */
  readonly downstream?: DownstreamOptions | undefined
  /** Aborting ends the attempt, before or after commit (the host gave up). */
  readonly signal?: AbortSignal | undefined
  /** Aborting ends the peek only (a pre-commit deadline); it is ignored once committed. */
  readonly peekSignal?: AbortSignal | undefined
  /** See {@link PumpOptions.secrets}. */
  readonly secrets?: readonly string[] | undefined
  /**
   * Asked once, when the first output arrived and before anything is written: `false` means
   * another attempt already won the client (a hedge), so nothing is written, the body is
   * cancelled and the outcome is `not-committed` with an `aborted` peek.
   */
  readonly claim?: (() => boolean) | undefined
  /** Called once, when the first output arrived and before anything is written. */
  readonly onCommit?: ((peek: Extract<PeekOutcome, { kind: 'output' }>) => void) | undefined
}

/**
 * What {@link deliver} reports.
 *
 * @group Downstream
 */
export type DeliverOutcome =
  | {
      readonly kind: 'committed'
      readonly peek: Extract<PeekOutcome, { kind: 'output' }>
      readonly pump: PumpOutcome
    }
  | { readonly kind: 'not-committed'; readonly peek: Exclude<PeekOutcome, { kind: 'output' }> }

function isReader(body: FrameSource | FrameReader): body is FrameReader {
  return (
    typeof (body as FrameReader).next === 'function' &&
    typeof (body as FrameReader).cancel === 'function'
  )
}

const deliverKeys = Object.keys({
  gate: true,
  body: true,
  adapter: true,
  peek: true,
  maxFrameBytes: true,
  transform: true,
  downstream: true,
  signal: true,
  peekSignal: true,
  secrets: true,
  claim: true,
  onCommit: true,
  onPartialEof: true,
  onThinkingOnly: true,
  idleTimeoutMs: true,
  writeStallTimeoutMs: true,
  stallThresholdMs: true,
} satisfies Record<keyof DeliverOptions, true>)

/**
 * One attempt over one upstream body: (with `earlyHeaders`, commit headers first,) peek for
 * the first output, and on output commit and pump to the end. On any other peek outcome
 * nothing reaches the client and the upstream body is released: the caller may retry.
 *
 * @group Downstream
 */
export function deliver(options: DeliverOptions): Promise<DeliverOutcome> {
  rejectUnknownKeys('deliver', options, deliverKeys)
  return deliverOn(options)
}

/**
 * {@link deliver} as the relay calls it: its signals may be library-made stops (no
 * `AbortSignal` per attempt for what only the library listens to).
 */
export async function deliverOn(
  options: Omit<DeliverOptions, 'signal' | 'peekSignal'> & {
    readonly signal?: SignalLike | undefined
    readonly peekSignal?: SignalLike | undefined
  },
): Promise<DeliverOutcome> {
  const { gate, adapter } = options
  // Checked before anything is read or written: a bad pump option must not surface after commit.
  const policy = normalizePumpPolicy(options)
  const reader = isReader(options.body)
    ? options.body
    : createFrameReader(
        options.body,
        options.maxFrameBytes === undefined ? {} : { maxFrameBytes: options.maxFrameBytes },
      )
  const peekStop = followStops([stopOf(gate), options.signal, options.peekSignal])
  let peeked: PeekOutcome
  try {
    try {
      // An attempt stopped before its peek began (another attempt won and may have closed
      // the response already) commits nothing, headers included.
      if (gate.earlyHeaders && !peekStop.controller.signal.aborted) await gate.commitHeaders()
    } catch (error) {
      await reader.cancel(error)
      throw error
    }
    try {
      peeked = await peekUntil(reader, adapter, options.peek ?? {}, peekStop.controller)
    } catch (error) {
      // An adapter that threw mid-peek: the upstream is released before the throw goes on.
      await reader.cancel(error).catch(() => {})
      throw error
    }
  } finally {
    peekStop.release()
  }
  if (peeked.kind === 'output' && options.claim !== undefined && !options.claim()) {
    const reason = new Error('another attempt reached the client first')
    peeked = { ...peeked, kind: 'aborted', reason }
  }
  if (peeked.kind !== 'output') {
    await reader.cancel(peeked.kind === 'aborted' ? peeked.reason : undefined)
    return { kind: 'not-committed', peek: peeked }
  }
  options.onCommit?.(peeked)
  // What the pump reads of its options, named (not a copy of every option given).
  const pumpOptions: PumpInput = {
    gate,
    frames: peeked.frames,
    reader: peeked.reader,
    tracker: peeked.tracker,
    transform: options.transform,
    downstream: options.downstream,
    signal: options.signal,
    secrets: options.secrets,
  }
  const pumped = await pumpWith(pumpOptions, policy)
  return { kind: 'committed', peek: peeked, pump: pumped }
}
