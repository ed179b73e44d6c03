/**
 * What the pump asks of the frames it relays, frame by frame: whether one ends the client's
 * reading, an error frame its client cannot read, a chunk's frames taken as one batch, the
 * block a frame closes, and the gaps counted as stalls.
 *
 * @module
 */

import type { StreamTracker } from '../classify/index.js'
import type { FrameVerdict, StreamAdapter } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import type { FrameReader } from '../sse/reader.js'
import type { FrameEncoder } from './encoder.js'
import type { Watchdog } from './watchdog.js'

/** Counts a gap between two upstream frames as a stall when it passes the threshold. */
export function recordGap(
  stalls: { count: number; totalMs: number; longestMs: number; thresholdMs: number },
  gap: number,
): void {
  if (gap <= stalls.thresholdMs) return
  stalls.count++
  stalls.totalMs += gap
  stalls.longestMs = Math.max(stalls.longestMs, gap)
}

/**
 * Whether `frame` (of verdict `kind`) is where the client's reading of the upstream's protocol
 * ends (`clientEndsAt`: Chat's `[DONE]`): nothing after it is written. Only an end or an error
 * is asked, so the hot path's output deltas are never decoded for it.
 */
export function endsClient(
  tracker: StreamTracker,
  frame: SseFrame,
  kind: FrameVerdict['kind'],
): boolean {
  return (kind === 'terminal' || kind === 'error') && tracker.adapter.clientEndsAt?.(frame) === true
}

/**
 * An upstream error frame its protocol's clients cannot read (data that is not the protocol's
 * JSON, a proxy's page: the openai SDK throws a `SyntaxError` on it, not its `APIError`), as
 * the client protocol's own error frame; `undefined` for every other frame, which goes out as
 * it came.
 */
export function unreadableError(
  frame: SseFrame,
  upstream: StreamAdapter,
  encoder: FrameEncoder,
): Uint8Array | undefined {
  const verdict = upstream.inspect(frame)
  if (verdict.kind !== 'error' || verdict.error.code !== 'MALFORMED_FRAME') return undefined
  // The protocol's own end marker (`[DONE]`, which Responses reads as no event) is no error.
  if (upstream.clientEndsAt?.(frame) === true) return undefined
  const error = { type: 'upstream_error', message: verdict.error.message }
  return encoder.adapter.renderError(error, encoder.state())
}

/**
 * The frame just read and those that came in the same upstream chunk, observed in order, up
 * to the client's end: they go out in one write, as a byte pipe's would.
 */
export function takeBatch(
  first: SseFrame,
  reader: FrameReader,
  tracker: StreamTracker,
  watchdog: Watchdog,
  arrived: number,
): { batch: SseFrame[]; kinds: FrameVerdict['kind'][]; clientEnded: boolean } {
  const batch: SseFrame[] = []
  const kinds: FrameVerdict['kind'][] = []
  for (let frame: SseFrame | null = first; frame !== null; ) {
    const kind = tracker.observeCommitted(frame)
    if (kind !== 'keepalive') watchdog.activity(arrived)
    batch.push(frame)
    kinds.push(kind)
    if (endsClient(tracker, frame, kind)) return { batch, kinds, clientEnded: true }
    try {
      frame = reader.takeBuffered()
    } catch {
      // The reader keeps the failure: the next read reports it, after this batch is out.
      frame = null
    }
  }
  return { batch, kinds, clientEnded: false }
}

/** The index of the block `frame` closes, or `undefined` when it closes none. */
export function closedBlock(frame: SseFrame, tracker: StreamTracker): number | undefined {
  try {
    const { block } = tracker.adapter.inspect(frame) as { block?: { index: number; edge: string } }
    return block?.edge === 'close' ? block.index : undefined
  } catch {
    return undefined
  }
}
