/**
 * Healing a cut after commit (guarantee 20 in docs/guarantees.md): at a cut the pump asks the relay for a stream
 * that continues the answer, and pumps its frames, spliced by the adapter, into the same
 * client stream. Without a continuation, or when none is sound, the cut is told as before.
 *
 * @module
 */

import { now } from '../call-safely.js'
import { classifyEof, type StreamState, type StreamTracker } from '../classify/index.js'
import type { ContinuationSplice, FrameVerdict } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import { type FrameReader, nextOn } from '../sse/reader.js'
import type { SignalLike } from '../stop.js'
import { terminatedFrame } from './encoder.js'
import { type EndingWriter, writeError } from './endings.js'
import type { PumpEnd, PumpErrorCause } from './pump-policy.js'
import type { Watchdog } from './watchdog.js'

/** The cut a continuation is asked for. */
export interface CutContext {
  /** How the upstream was cut (the honest error the client gets when it is not healed). */
  readonly cause: PumpErrorCause
  /** What the client's stream showed up to the cut (a live view). */
  readonly state: StreamState
  /** Aborts when the client leaves or the host gives up. */
  readonly signal: SignalLike
}

/** A continuation stream, peeked to its first output, with its splice into the client's. */
export interface ContinuedStream {
  /** The frames its peek consumed, preamble included. */
  readonly frames: readonly SseFrame[]
  readonly reader: FrameReader
  /** Its frames as frames of the client's stream. */
  readonly splice: ContinuationSplice
  /** Sees every frame of the continuation as it came (its own usage and end). */
  observe(frame: SseFrame): void
}

/**
 * What the relay hands the pump so a cut can be healed: asked at each cut, it answers a
 * continuation, or `null` when none is sound or none could be had (never throws).
 */
export interface PumpContinuation {
  next(cut: CutContext): Promise<ContinuedStream | null>
}

/** What a heal needs of the pump's run. */
export interface HealingRun {
  reader: FrameReader
  readonly stop: SignalLike
  readonly watchdog: Watchdog
  readonly out: EndingWriter
  readonly options: { readonly tracker: StreamTracker }
  /** Restarts the idle and write-stall clocks (a fired idle clock stopped the last watch). */
  rewatch(): void
  write(frame: SseFrame, kind?: FrameVerdict['kind']): Promise<void> | undefined
  arrived(): number
  atEof(cut?: boolean): PumpEnd | Promise<PumpEnd>
  /** Ends at the client's end of the stream (`clientEndsAt`), releasing the rest of the body. */
  atClientEnd(): Promise<PumpEnd>
  afterReadFailure(error: unknown): Promise<PumpEnd>
}

/**
 * At a cut: the end of a healed stream, or `undefined` when the cut must be told (not a cut
 * after output, or no continuation could be had). The cut upstream is
 * released before the next is asked for. `held`: the index of a block whose close the pump
 * held back, which the continuation extends.
 */
export async function healCut(
  run: HealingRun,
  continuation: PumpContinuation,
  cause: PumpErrorCause,
  held?: number,
): Promise<PumpEnd | undefined> {
  const { state } = run.options.tracker
  if (state.terminalSeen || state.errors > 0 || classifyEof(state).kind !== 'partial') {
    return undefined
  }
  await run.reader.cancel().catch(() => {})
  run.rewatch()
  // A block whose close the pump held (the client never got it) is still open to the client.
  const client = held === undefined ? state : { ...state, openBlocks: [...state.openBlocks, held] }
  let continued: ContinuedStream | null
  try {
    continued = await continuation.next({ cause, state: client, signal: run.stop })
  } catch {
    continued = null
  }
  if (continued === null) return undefined
  run.reader = continued.reader
  return pumpContinued(run, continued, cause)
}

/** Pumps a continuation to its end: its frames spliced, observed by the client's tracker. */
async function pumpContinued(
  run: HealingRun,
  continued: ContinuedStream,
  cause: PumpErrorCause,
): Promise<PumpEnd> {
  const { tracker } = run.options
  const spliced = (frame: SseFrame): readonly SseFrame[] | undefined => {
    try {
      continued.observe(frame)
      const out = continued.splice(frame)
      return Array.isArray(out) ? out : undefined
    } catch {
      return undefined
    }
  }
  /** `false` when the splice failed: the cut is then told. */
  const emit = async (frame: SseFrame): Promise<boolean> => {
    const out = spliced(frame)
    if (out === undefined) return false
    for (const each of out) {
      const kind = tracker.observe(each).kind
      if (kind !== 'keepalive') run.watchdog.activity(now())
      await run.write(each, kind)
    }
    return true
  }
  const told = async (): Promise<PumpEnd> => {
    await run.reader.cancel().catch(() => {})
    return writeError(run.out, cause, {
      type: 'upstream_error',
      message: 'The upstream stream was cut and its continuation could not be spliced',
    })
  }
  for (const frame of continued.frames) {
    const whole = frame.terminated ? frame : terminatedFrame(frame, tracker.adapter)
    if (whole !== null && !(await emit(whole))) return told()
  }
  for (;;) {
    let frame: SseFrame | null
    try {
      frame = await nextOn(run.reader, run.stop)
    } catch (error) {
      return run.afterReadFailure(error)
    }
    const whole =
      frame === null || frame.terminated ? frame : terminatedFrame(frame, tracker.adapter)
    if (whole === null) return run.atEof(frame !== null)
    run.arrived()
    if (!(await emit(whole))) return told()
    // Nothing after the client's end (Chat's `[DONE]`) is read or written.
    if (tracker.adapter.clientEndsAt?.(whole) === true) return run.atClientEnd()
  }
}
