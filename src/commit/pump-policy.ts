/**
 * The pump's options and what it reports: its policy and defaults, the downstream side (the
 * client's adapter and translator), how a pumped stream ended, and the one `normalize`.
 *
 * @module
 */

import type { EofClass, StreamTracker } from '../classify/index.js'
import type { DownstreamClosedError, StreamTimeoutError } from '../errors.js'
import { countNormalization, positiveMilliseconds, timeoutMilliseconds } from '../options.js'
import type { RenderableError, StreamAdapter } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import type { FrameReader } from '../sse/reader.js'
import type { CommitGate } from './gate-options.js'
import type { FrameTranslator, ResponseTranslator, StreamTranslator } from './translator.js'

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
   * End the stream when a write is blocked and the client has taken no byte for this long
   * (it stopped reading), as the sink's `bytesTaken` shows (`nodeSink`, `webSink`; looked at
   * from the moment a write blocks and every second after, a quarter of the bound when that
   * is shorter): a slow client still reading is never cut, however long one write waits on
   * it. The bound runs from the client's last byte (or the block, if later), timed when the
   * sink saw it (a write's callback, the consumer's pull) or else by the look that found it, so
   * the cut comes within the bound and one look of that byte. A sink without `bytesTaken` is measured by the blocked write's own wait.
   * The response is cut, the upstream body cancelled, and the end is `downstream-stalled`, a
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
  /**
   * A translator from `Response` to `Response` (see {@link ResponseTranslator}). Needs
   * `adapter`. The one shape also given whole answers: for a non-streaming request it gets
   * the upstream's 2xx JSON `Response`, and the client gets the body it returns.
   */
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
 * What {@link "stream-boundary"!pump | pump} reports.
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
 * Options of {@link "stream-boundary"!pump | pump}.
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
   * Credentials to redact by exact value (as they are and in any JSON escaping) from every frame
   * relayed after commit (`relay()` passes the request's keys): a frame that quotes a key, in
   * an error or an answer's id, never reaches the client with it. Error frames are also
   * redacted by shape (`sk-…`, `AIza…`, `?key=…`, bearer tokens), with or without secrets.
   */
  readonly secrets?: readonly string[] | undefined
}

/**
 * One translator at a time: `transform` (a byte rewrite) beside a `downstream` translator
 * would be ignored in silence, so it is a `TypeError`.
 */
export function checkOneTranslator(options: {
  readonly transform?: unknown
  readonly downstream?: DownstreamOptions | undefined
}): void {
  const { transform, downstream } = options
  if (transform === undefined || downstream === undefined) return
  const other = (
    ['transform', 'translateFrames', 'translateStream', 'translateResponse'] as const
  ).find((key) => downstream[key] !== undefined)
  if (other === undefined) return
  throw new TypeError(
    `transform and downstream.${other} both translate frames: give one (downstream.${other} for the client's protocol)`,
  )
}

/** A pump policy checked and with its defaults: what the pump is given. */
export interface NormalizedPumpPolicy {
  readonly onPartialEof: NonNullable<PumpPolicy['onPartialEof']>
  readonly onThinkingOnly: NonNullable<PumpPolicy['onThinkingOnly']>
  readonly idleTimeoutMs: number
  readonly writeStallTimeoutMs: number
  readonly stallThresholdMs: number
}

/** Validates a pump policy and fills in its defaults; throws a `RangeError` naming a bad option. */
export function normalizePumpPolicy(policy: PumpPolicy): NormalizedPumpPolicy {
  countNormalization('pump')
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
