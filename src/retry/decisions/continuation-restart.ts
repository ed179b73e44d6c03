/**
 * A continuation that restarts is never appended (guarantee 20 in docs/guarantees.md): when the continuation
 * request went out without the prefill (an attempt function that sent a body of its own) or
 * the model ignored it, the answer begins again with the text the client already has. Its
 * frames are held while its text is still a prefix of the received text: released at the
 * first character that differs (a continuation), refused once it has repeated all of it (a
 * restart), and refused when it ends while it still matches (it cannot be told from a
 * restart cut short). The honest cut error is then written, as without continuation.
 *
 * @module
 */

import type { StreamTracker } from '../../classify/index.js'
import type { FrameVerdict } from '../../protocols/types.js'
import type { SseFrame } from '../../sse/frame.js'
import { type FrameReader, nextOn } from '../../sse/reader.js'

/**
 * Where a held continuation stands: `hold` (its text so far, `matched` characters, repeats
 * the start of the received text), `release` (it continues: send what was held),
 * `restarted` (it repeated the whole received text, or ended while still repeating it).
 * @internal exported for tests
 */
export type RestartCheck =
  | { readonly kind: 'hold'; readonly matched: number }
  | { readonly kind: 'release' }
  | { readonly kind: 'restarted' }

/**
 * The next step of the check, after `matched` characters of `received` were repeated and
 * `seen` came (a frame's verdict, or `'end'`: the stream ended or failed). Pure.
 * @internal exported for tests
 */
export function checkRestart(
  received: string,
  matched: number,
  seen: FrameVerdict | 'end',
): RestartCheck {
  if (received.length === 0) return { kind: 'release' }
  // An end while the text still repeats the received one: a restart cut short, or a
  // continuation that cannot be told from one. Never appended.
  const ended: RestartCheck = matched > 0 ? { kind: 'restarted' } : { kind: 'release' }
  if (seen === 'end') return ended
  switch (seen.kind) {
    case 'keepalive':
    case 'meta':
    case 'reasoning':
      return { kind: 'hold', matched }
    case 'terminal':
    case 'error':
    case 'tool':
    case 'refusal':
      return ended
    case 'text': {
      const rest = received.length - matched
      const { text } = seen
      if (text.length >= rest && text.startsWith(received.slice(matched))) {
        return { kind: 'restarted' }
      }
      if (!received.startsWith(text, matched)) return { kind: 'release' }
      const next = matched + text.length
      if (seen.terminal !== undefined) return next > 0 ? { kind: 'restarted' } : { kind: 'release' }
      return { kind: 'hold', matched: next }
    }
  }
}

/** What {@link holdRepeats} found. */
export type Held =
  /** Every frame read, the peeked ones first: the continuation goes to the client. */
  | { readonly kind: 'release'; readonly frames: readonly SseFrame[] }
  | { readonly kind: 'restarted' }

/** How far a hold may read past the frames that repeat the received text. */
export interface HoldBounds {
  readonly maxFrames: number
  readonly maxBytes: number
}

/**
 * Reads a peeked continuation on while its text repeats the start of `received` (every frame
 * through its own `tracker`). Frames that repeat received text are bounded by its length;
 * the others by `bounds`, past which a hold that matched anything is a restart. Throws what
 * the read or the tracker throws (a timeout, an abort, a read error).
 */
export async function holdRepeats(
  received: string,
  peeked: { readonly frames: readonly SseFrame[]; readonly reader: FrameReader },
  tracker: StreamTracker,
  bounds: HoldBounds,
  signal: AbortSignal,
): Promise<Held> {
  const frames = [...peeked.frames]
  let check: RestartCheck = { kind: 'hold', matched: 0 }
  for (const frame of peeked.frames) {
    if (check.kind !== 'hold') break
    check = checkRestart(received, check.matched, tracker.adapter.inspect(frame))
  }
  let extraFrames = 0
  let extraBytes = 0
  while (check.kind === 'hold') {
    const frame = await nextOn(peeked.reader, signal)
    if (frame === null) {
      check = checkRestart(received, check.matched, 'end')
      break
    }
    frames.push(frame)
    const verdict = tracker.observe(frame)
    // A frame the body's end cut is its end: what it says is not to be trusted.
    const next = checkRestart(received, check.matched, frame.terminated ? verdict : 'end')
    if (next.kind === 'hold' && next.matched === check.matched) {
      extraFrames++
      extraBytes += frame.raw.length
      if (extraFrames > bounds.maxFrames || extraBytes > bounds.maxBytes) {
        check = checkRestart(received, check.matched, 'end')
        break
      }
    }
    check = next
  }
  return check.kind === 'release' ? { kind: 'release', frames } : { kind: 'restarted' }
}
