/**
 * How a pumped stream ends: at upstream EOF by its class and the policy, after a read
 * failure, or before content with a real status; never a fake success. And the release of
 * the upstream on every end.
 *
 * @module
 */

import type { EofClass, StreamTracker } from '../classify/index.js'
import {
  isDownstreamClosedError,
  isFrameTooLargeError,
  isUpstreamReadError,
  StreamTimeoutError,
} from '../errors.js'
import { errorBodyFor } from '../protocols/common.js'
import type { RenderableError, RenderState, StreamAdapter } from '../protocols/types.js'
import { type FrameReader, nextOn } from '../sse/reader.js'
import { type SignalLike, Stop } from '../stop.js'
import type { CommitGate } from './gate-options.js'
import type { PumpEnd, PumpErrorCause } from './pump-policy.js'
import { stallOf } from './watchdog.js'

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
export interface EndingWriter {
  rendered(bytes: Uint8Array): Promise<void>
  /** `undefined` when the close finished at once. */
  close(): Promise<void> | undefined
  /** The client's adapter, and what it has been sent so far. */
  readonly adapter: StreamAdapter
  state(): RenderState
}

/** Writes the protocol's error frame for a cut, then closes. */
export async function writeError(
  out: EndingWriter,
  cause: PumpErrorCause,
  error: RenderableError,
): Promise<PumpEnd> {
  await out.rendered(out.adapter.renderError(error, out.state()))
  await out.close()
  return { kind: 'error-written', cause, error }
}

/** What {@link endAtEof} reads of the pump's policy. */
interface EofPolicy {
  onPartialEof: 'error' | 'synthesize-stop'
  onThinkingOnly: 'error' | 'promote-reasoning'
}

/**
 * The end at upstream EOF, decided by its class and the policy; never a fake success. Not an
 * async step for the common end, a completed stream whose sink closed at once: the end itself
 * (each promise costs a host running async hooks); a throw of the close rejects, as before.
 */
export function endAtEof(
  out: EndingWriter,
  tracker: StreamTracker,
  eof: EofClass,
  policy: EofPolicy,
  cut: boolean,
): PumpEnd | Promise<PumpEnd> {
  if (eof.kind !== 'completed') return endAtIncompleteEof(out, tracker, eof, policy, cut)
  let closing: Promise<void> | undefined
  try {
    closing = out.close()
  } catch (error) {
    return Promise.reject(error)
  }
  return closing === undefined ? completedEnd(tracker) : closing.then(() => completedEnd(tracker))
}

/**
 * A completed stream's end: an error frame that went out after the terminal (OpenRouter's
 * after a `length` finish) makes the client's SDK raise, so the client got the upstream's
 * error, not a completion.
 */
function completedEnd(tracker: StreamTracker): PumpEnd {
  return tracker.state.errors > 0 ? { kind: 'upstream-error' } : { kind: 'completed' }
}

/** {@link endAtEof} for a stream that did not complete (a cut, partial, thinking-only, empty). */
async function endAtIncompleteEof(
  out: EndingWriter,
  tracker: StreamTracker,
  eof: Exclude<EofClass, { kind: 'completed' }>,
  policy: EofPolicy,
  cut: boolean,
): Promise<PumpEnd> {
  const { state } = tracker
  const upstreamError = (cause: 'partial-eof' | 'eof-mid-frame' | 'thinking-only' | 'empty') =>
    writeError(out, cause, { type: 'upstream_error', message: endMessages[cause] })
  // Output, then the body ended inside an event: tokens were lost, whatever the policy says
  // of a stream that merely stopped between events. After the terminal the answer was whole.
  if (cut && eof.kind !== 'empty') return upstreamError('eof-mid-frame')
  switch (eof.kind) {
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
export async function endAfterReadFailure(
  error: unknown,
  stop: SignalLike,
  reader: FrameReader,
  tracker: StreamTracker,
  out: EndingWriter,
  atEof: () => PumpEnd | Promise<PumpEnd>,
): Promise<PumpEnd> {
  const stopped = stop.aborted && error === stop.reason
  const clientGone = stopped && isDownstreamClosedError(error)
  // After the upstream's terminal event the answer is whole and written: a late stall, break
  // or host abort ends it cleanly (invariant 22); only the client leaving does not.
  if (tracker.state.terminalSeen && !clientGone) {
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

/** How a throw out of the pump's loops ends it (it rethrows code that threw). */
export async function endOfThrow(
  error: unknown,
  signal: SignalLike | undefined,
  reader: FrameReader,
): Promise<PumpEnd> {
  const stalled = stallOf(error)
  if (stalled !== undefined) return { kind: 'downstream-stalled', error: stalled }
  if (isDownstreamClosedError(error)) return { kind: 'client-gone', error }
  if (signal?.aborted && error === signal.reason) return { kind: 'aborted', reason: error }
  // Code that threw (a transform, an adapter): the upstream is released all the same.
  await reader.cancel(error).catch(() => {})
  throw error
}

/**
 * Releases the upstream on every end, and cuts the client when the end is not a clean one;
 * `undefined` when there is nothing to wait for (a clean end of a body read to its end).
 */
export function release(
  end: PumpEnd,
  reader: FrameReader,
  gate: CommitGate,
): Promise<void> | undefined {
  const cut =
    end.kind === 'client-gone' || end.kind === 'aborted' || end.kind === 'downstream-stalled'
  return cut || !reader.done ? releaseNow(end, reader, gate) : undefined
}

async function releaseNow(end: PumpEnd, reader: FrameReader, gate: CommitGate): Promise<void> {
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

/** How long, and how many bytes, the rest of an upstream body after the client's end is read. */
const dropRestMs = 250
const dropRestBytes = 64 * 1024

/** Reads the rest of `reader` for a moment and drops it (see `atClientEnd`); cancels what is left. */
export async function dropRest(reader: FrameReader): Promise<void> {
  // A library-made stop, not an AbortController: no signal is made per request (docs/performance.md).
  const stop = new Stop()
  const timer = setTimeout(
    () => stop.abort(new Error('the rest after the end was not read')),
    dropRestMs,
  )
  const start = reader.bytesRead
  try {
    while (!reader.done && reader.bytesRead - start <= dropRestBytes) {
      if ((await nextOn(reader, stop)) === null) break
    }
  } catch {
    // A stall, a failure or a frame too large: the rest is cancelled below.
  } finally {
    clearTimeout(timer)
  }
  if (!reader.done) await reader.cancel().catch(() => {})
}
