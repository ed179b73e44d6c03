/**
 * How upstream frames become the client's bytes: as they came, through a per-frame transform,
 * or through a whole-stream translator, with the client's tracker watching what was sent;
 * and the byte helpers the pump writes with (whole frames, redaction, spans).
 *
 * @module
 */

import { createStreamTracker, type StreamTracker } from '../classify/index.js'
import { redactText, redactValues } from '../protocols/sanitize.js'
import type { FrameVerdict, RenderState, StreamAdapter } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import { FrameSplitter } from '../sse/splitter.js'
import type { Stop } from '../stop.js'
import type { CommitGate } from './gate-options.js'
import type { DownstreamOptions, DownstreamTransformContext, PumpOptions } from './pump-policy.js'
import { type AnyTranslator, startTranslator, type TranslatorRun } from './translator.js'
import type { Watchdog } from './watchdog.js'

/** The frames' bytes as one array: a view when they lie side by side in one chunk. */
export function joinRaw(frames: readonly SseFrame[]): Uint8Array {
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

const textEncoder = new TextEncoder()

/** The client tracker's frame bound: a translator's frames are the gateway's own, not untrusted. */
const clientFrameBytes = 16 * 1024 * 1024

/** How upstream frames become the client's bytes, and what the client was sent so far. */
export interface FrameEncoder {
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
export function createFrameEncoder(
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
export function startWholeStream(
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
export function raceStop(waiting: Promise<void>, stop: Stop): Promise<void> {
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

/**
 * A frame as the client may see it: its bytes with secrets redacted by value, and by shape too
 * when `byShape` (an error frame); a new frame only then.
 */
export function redactedFrame(
  frame: SseFrame,
  secrets: readonly string[],
  byShape = false,
): SseFrame {
  const bytes = redactBytes(frame.raw, secrets, byShape)
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
export function pushRaw(
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
export function terminatedFrame(frame: SseFrame, adapter: StreamAdapter): SseFrame | null {
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

/**
 * Bytes with every secret redacted by value, and, when `byShape` (an error frame, which may
 * quote a key the library never saw: a caller's own, a URL's `?key=`), anything shaped like a
 * key; the same bytes when nothing was redacted.
 */
export function redactBytes(
  bytes: Uint8Array,
  secrets: readonly string[],
  byShape = false,
): Uint8Array {
  const text = utf8.decode(bytes)
  const redacted = byShape ? redactText(text, secrets) : redactValues(text, secrets)
  return redacted === text ? bytes : textEncoder.encode(redacted)
}

const utf8 = new TextDecoder()

/** Writes spans one after another, each once the sink took the one before. */
export async function pushSpans(
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
