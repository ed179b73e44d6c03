/**
 * After commit: write the peeked frames, then every further frame as its exact bytes,
 * through the gate, and end honestly.
 *
 * @module
 */

import { now } from '../call-safely.js'
import { classifyEof, type EofClass } from '../classify/index.js'
import { DownstreamClosedError, isStreamTimeoutError, isUpstreamReadError } from '../errors.js'
import type { TimerSlot } from '../peek/clock.js'
import { joinBytes } from '../protocols/bytes.js'
import type { FrameVerdict } from '../protocols/types.js'
import { FrameView, type SseFrame } from '../sse/frame.js'
import { type FrameReader, nextOn, type RawFrameReader, rawFrameReader } from '../sse/reader.js'
import type { SignalLike, Stop } from '../stop.js'
import { healCut, type PumpContinuation } from './continuation.js'
import {
  createFrameEncoder,
  type FrameEncoder,
  joinRaw,
  pushRaw,
  pushSpans,
  raceStop,
  redactBytes,
  redactedFrame,
  startWholeStream,
  terminatedFrame,
} from './encoder.js'
import {
  dropRest,
  type EndingWriter,
  endAfterReadFailure,
  endAtEof,
  endOfThrow,
  release,
} from './endings.js'
import { closedBlock, endsClient, recordGap, takeBatch, unreadableError } from './pump-frames.js'
import {
  checkOneTranslator,
  normalizePumpPolicy,
  type PumpEnd,
  type PumpErrorCause,
  type PumpOptions,
  type PumpOutcome,
} from './pump-policy.js'
import { SecretBytes } from './secret-bytes.js'
import type { TranslatorRun } from './translator.js'
import { stallOf, type Watchdog, watchPump } from './watchdog.js'

/**
 * The view every pump's hot path asks its questions through: it is pointed at a frame and
 * read in the same synchronous step, so one serves all pumps (no object per stream).
 */
const view = new FrameView()

/**
 * What the hot path's `take` rejects with once the client's end went out: the read stops there
 * and the pump ends as at the upstream's end (`atClientEnd`).
 */
const clientEndWritten: unique symbol = Symbol('client end written')

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
  checkOneTranslator(options)
  return pumpOn(options, normalizePumpPolicy(options))
}

/** What the library itself hands the pump: its signal may be a library-made stop. */
export type PumpInput = Omit<PumpOptions, 'signal'> & {
  readonly signal?: SignalLike | undefined
  /** Heals a cut after commit, when the relay's `continueAfterCut` is on. */
  readonly continuation?: PumpContinuation | undefined
  /** The attempt's first-output clock's timer, handed over at commit: the watchdog's. */
  readonly timer?: TimerSlot | undefined
}

/**
 * One pump's state and steps: its writes (as they came, through a translator, rendered by
 * the library), its endings and its two read loops (the hot path over raw chunks, then
 * frame by frame at the upstream's end).
 */
class PumpRun {
  readonly encoder: FrameEncoder
  readonly started = now()
  frames = 0
  readonly bytesAtStart: number
  readonly stalls: { count: number; totalMs: number; longestMs: number; thresholdMs: number }
  eof: EofClass | null = null
  /** The hot path wrote the client's end (`clientEndsAt`): it reads no further. */
  clientEnded = false
  /** When the previous upstream chunk arrived, for the stall gaps. */
  previous = 0
  // Replaced when a continuation restarts the clocks (a fired idle clock stopped them).
  stop: Stop
  watchdog: Watchdog
  unwatch: () => void
  /** The upstream being read: a continuation's after a healed cut. */
  reader: FrameReader
  /** The request's secrets (a continuation's key joins them): redacted from every write. */
  readonly secrets: SecretBytes
  readonly translator: TranslatorRun | undefined
  readonly out: EndingWriter
  /**
   * With a continuation to heal cuts: a block's close (Anthropic's `content_block_stop`) is
   * held until the next frame shows the message goes on, so a cut right after it is healed
   * inside the same block (guarantee 20 in docs/guarantees.md). The frame held, if any.
   */
  held: SseFrame | undefined

  constructor(
    readonly options: PumpInput,
    readonly policy: ReturnType<typeof normalizePumpPolicy>,
  ) {
    const { gate } = options
    this.encoder = createFrameEncoder(options)
    this.bytesAtStart = gate.bytesWritten
    this.stalls = { count: 0, totalMs: 0, longestMs: 0, thresholdMs: policy.stallThresholdMs }
    const watched = watchPump(gate, options.signal, policy, options.timer)
    this.stop = watched.stop
    this.watchdog = watched.watchdog
    this.unwatch = watched.release
    this.reader = options.reader
    this.secrets = new SecretBytes(options.secrets ?? [])
    this.translator = startWholeStream(options, this.encoder, (bytes) =>
      this.send(gate.write(bytes)),
    )
    this.out = {
      rendered: (bytes) => this.writeRendered(bytes),
      close: () => this.close(),
      adapter: this.encoder.adapter,
      state: this.encoder.state,
    }
  }

  /** Every downstream write goes through here: a blocked one is timed by the watchdog. */
  send(written: Promise<void>): Promise<void> {
    return this.options.gate.writePending ? this.watchdog.blocked(written) : written
  }

  /**
   * Bytes as the client may see them: an error frame's redacted by value and by shape (it may
   * quote a key the library never saw), any other's by value when it holds a secret.
   */
  redacted(bytes: Uint8Array, error: boolean): Uint8Array {
    const { secrets } = this
    if (error) return redactBytes(bytes, secrets.secrets, true)
    return secrets.any && secrets.in(bytes) ? redactBytes(bytes, secrets.secrets) : bytes
  }

  /** Writes one frame; not `async` (a frame with nothing to wait for costs no promise). */
  write(frame: SseFrame, kind?: FrameVerdict['kind']): Promise<void> | undefined {
    const { translator, secrets } = this
    const seen = kind ?? this.options.tracker.adapter.inspect(frame).kind
    if (seen === 'error' && translator === undefined) {
      const rendered = unreadableError(frame, this.options.tracker.adapter, this.encoder)
      if (rendered !== undefined) {
        this.frames++
        return this.writeRendered(this.redacted(rendered, true))
      }
    }
    if (translator !== undefined) {
      // Keep-alives are the relay's business, never the translator's; what it is given is
      // redacted, so what it writes quotes no key.
      this.frames++
      if (seen === 'keepalive') return undefined
      const given =
        seen === 'error'
          ? redactedFrame(frame, secrets.secrets, true)
          : secrets.any && secrets.in(frame.raw)
            ? redactedFrame(frame, secrets.secrets)
            : frame
      const waiting = translator.push(given)
      return waiting === undefined ? undefined : raceStop(waiting, this.stop)
    }
    let bytes = this.encoder.encode(frame, kind)
    if (bytes !== null) bytes = this.redacted(bytes, seen === 'error')
    if (bytes === null || bytes.length === 0) {
      this.frames++
      return undefined
    }
    const { gate } = this.options
    const written = gate.write(bytes)
    // Taken at once (the sink had room, nothing queued): counted now, nothing to wait for.
    if (!gate.writePending && gate.failure === undefined) {
      this.frames++
      return undefined
    }
    return this.send(written).then(this.#counted)
  }

  readonly #counted = () => void this.frames++

  /**
   * Writes library-rendered bytes and lets the client's tracker see them, so its state stays
   * true. A translator's input fails first, and all it wrote goes out before them.
   */
  async writeRendered(bytes: Uint8Array): Promise<void> {
    await this.translator?.finish('fail')
    // An ending's message may quote the upstream's words (with a cut key's first characters).
    const { secrets } = this.secrets
    const out = secrets.length > 0 ? redactBytes(bytes, secrets) : bytes
    this.encoder.sent(out)
    await this.send(this.options.gate.write(out))
  }

  /**
   * Closing waits for the client to take what is buffered, so it is bounded the same way. A
   * translator's input ends first and all it wrote goes out; when what it wrote has no final
   * event of the client's protocol, the ending is the protocol's error, never a clean close.
   * Everything is written by then, so the host's signal no longer ends the close (a host that
   * aborts on the response's `close` event would otherwise undo a whole answer); only the
   * client can: a close it did not let finish (the gate not `delivered`) is the client gone.
   */
  close(): Promise<void> | undefined {
    if (this.translator !== undefined) return this.closeTranslated(this.translator)
    const { gate } = this.options
    const closing = gate.close()
    // A sink that closed at once (a web stream's) is not waited for: no look timer, no promise.
    if (!gate.delivered && gate.failure === undefined)
      return this.watchdog.blocked(closing, false).then(this.#delivered)
    this.#delivered()
    return undefined
  }

  async closeTranslated(translator: TranslatorRun): Promise<void> {
    const { encoder } = this
    await translator.finish('end')
    if (!encoder.clientEnded()) {
      await this.writeRendered(
        encoder.adapter.renderError(
          {
            type: 'upstream_error',
            message: 'the translator ended the stream without its final event',
          },
          encoder.state(),
        ),
      )
    }
    const { gate } = this.options
    await this.watchdog.blocked(gate.close(), false)
    this.#delivered()
  }

  /** After the close: one the client did not let finish is the client gone. */
  readonly #delivered = (): void => {
    const { gate } = this.options
    if (!gate.delivered) {
      throw (
        gate.failure ??
        new DownstreamClosedError('write-failed', new Error('the response was cut before its end'))
      )
    }
  }

  /** The end at the upstream's end; not `async` when there is nothing to heal or flush. */
  atEof(cut = false): PumpEnd | Promise<PumpEnd> {
    const { tracker } = this.options
    this.eof = classifyEof(tracker.state)
    const healing = this.heal(cut ? 'eof-mid-frame' : 'partial-eof')
    if (healing === undefined && this.held === undefined)
      return endAtEof(this.out, tracker, this.eof, this.policy, cut)
    return this.healedOrEnd(healing, cut)
  }

  async healedOrEnd(healing: Promise<PumpEnd | undefined> | undefined, cut: boolean) {
    if (healing !== undefined) {
      const healed = await healing
      if (healed !== undefined) return healed
    }
    if (this.held !== undefined) await this.flushHeld()
    return endAtEof(this.out, this.options.tracker, this.eof as EofClass, this.policy, cut)
  }

  /**
   * The client's end went out (Chat's `[DONE]`): the stream ends as at the upstream's end, at
   * once. What the upstream still sends is read and dropped for a moment, so a body that ends
   * right after (as most do) is read to its end and its connection stays reusable; one that
   * holds or keeps sending is cancelled.
   */
  async atClientEnd(): Promise<PumpEnd> {
    const end = await this.atEof()
    await dropRest(this.reader)
    return end
  }

  /** A cut after output, healed by a continuation when the relay has one (guarantee 20 in docs/guarantees.md). */
  heal(cause: PumpErrorCause): Promise<PumpEnd | undefined> | undefined {
    const { continuation } = this.options
    if (continuation === undefined) return undefined
    const held = this.held === undefined ? undefined : closedBlock(this.held, this.options.tracker)
    return healCut(this, continuation, cause, held).then((end) => {
      if (end !== undefined) {
        // The continuation goes on inside the held block and closes it itself.
        this.held = undefined
        this.eof = classifyEof(this.options.tracker.state)
      }
      return end
    })
  }

  /** Whether a block's close is held: a continuation may heal a cut, and the adapter splices. */
  holdsCloses(): boolean {
    const { continuation, tracker } = this.options
    return continuation !== undefined && tracker.adapter.spliceContinuation !== undefined
  }

  /** Writes the held block close, when a frame shows the message goes on or no heal came. */
  async flushHeld(): Promise<void> {
    const { held } = this
    if (held === undefined) return
    this.held = undefined
    await this.write(held, 'meta')
  }

  rewatch(): void {
    this.unwatch()
    const watched = watchPump(this.options.gate, this.options.signal, this.policy)
    this.stop = watched.stop
    this.watchdog = watched.watchdog
    this.unwatch = watched.release
  }

  /** A chunk arrived: the gap since the previous one is counted when it is a stall. */
  arrived(): number {
    const at = now()
    recordGap(this.stalls, at - this.previous)
    this.previous = at
    return at
  }

  /**
   * The hot path, for frames relayed as their bytes from a reader this library made: the
   * frames of one upstream chunk, as bytes seen through a reused view (no object per frame),
   * observed in order and written as one span of the chunk. Returns what is left to wait
   * for, or `undefined` when the sink took the bytes at once: no promise hop per chunk then.
   */
  relayChunk(fast: RawFrameReader, first: Uint8Array): Promise<void> | undefined {
    const { tracker, gate } = this.options
    const { encoder, watchdog, secrets } = this
    const arrived = this.arrived()
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
      this.clientEnded = endsClient(tracker, view, kind)
      this.frames++
      const rendered =
        kind === 'error' ? unreadableError(view.toFrame(), tracker.adapter, encoder) : undefined
      if (rendered !== undefined) {
        // Goes out in the frame's place; the span starts again after it.
        before ??= []
        if (length > 0) before.push(new Uint8Array(span.buffer, span.byteOffset, length))
        before.push(rendered)
        length = 0
      } else if (length === 0) {
        // The chunk's first frame (often its only one), or the first after a rendered one.
        span = raw
        length = raw.length
      } else if (raw.buffer === span.buffer && raw.byteOffset === span.byteOffset + length) {
        length += raw.length
      } else {
        before ??= []
        before.push(new Uint8Array(span.buffer, span.byteOffset, length))
        span = raw
        length = raw.length
      }
      if (this.clientEnded) break
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
    if (
      errors ||
      (secrets.any && (secrets.in(last) || before?.some((piece) => secrets.in(piece)) === true))
    ) {
      // A frame quotes a key, or is an error frame (which may quote one by shape): the chunk
      // goes out whole, redacted (rare, so a copy).
      const joined = joinBytes([...(before ?? []), last])
      return pushRaw(this.redacted(joined, errors), gate, encoder, watchdog)
    }
    if (before === undefined) return pushRaw(last, gate, encoder, watchdog)
    if (length > 0) before.push(last)
    return pushSpans(before, gate, encoder, watchdog)
  }

  /** Once the chunk holding the client's end is out, the hot path stops (`take` fails with a marker). */
  stopAtClientEnd(pushed: Promise<void> | undefined): Promise<void> | undefined {
    if (!this.clientEnded) return pushed
    return (pushed ?? Promise.resolve()).then(() => Promise.reject(clientEndWritten))
  }

  /** The peeked frames, then the hot path, then frame by frame to the end. */
  async run(): Promise<PumpEnd> {
    const { options, reader } = this
    const { tracker } = options
    for (const frame of options.frames) {
      // A peeked frame the body's end cut (the last one) goes out whole, or not at all.
      const whole = frame.terminated ? frame : terminatedFrame(frame, tracker.adapter)
      if (whole !== null) {
        const writing = this.write(whole)
        if (writing !== undefined) await writing
      }
      if (whole !== null && tracker.adapter.clientEndsAt?.(whole) === true)
        return this.atClientEnd()
    }
    this.previous = now()
    // Holding a block's close needs each chunk's last frame: frame by frame then.
    const fast = this.encoder.raw && !this.holdsCloses() ? rawFrameReader(reader) : undefined
    if (fast !== undefined) {
      // The hot path: the reader hands each chunk's frames over where the chunk lands.
      let ended: { readonly failed: unknown } | null
      try {
        ended = await fast.pumpRaw(this.stop, (raw) =>
          this.stopAtClientEnd(this.relayChunk(fast, raw)),
        )
      } catch (error) {
        return this.afterReadFailure(error)
      }
      if (ended !== null) {
        if (ended.failed === clientEndWritten) return this.atClientEnd()
        throw ended.failed
      }
      // The body ended on a frame's end (nothing half-read): its end at once, no read step.
      if (reader.done && reader.bufferedBytes === 0) return this.atEof()
    }
    return this.framesToEnd()
  }

  async afterReadFailure(error: unknown): Promise<PumpEnd> {
    const { tracker } = this.options
    // The stop the read failed on: a heal that finds no continuation restarts the clocks.
    const { stop } = this
    const idle =
      stop.aborted &&
      error === stop.reason &&
      isStreamTimeoutError(error) &&
      error.timeout === 'idle'
    if (!tracker.state.terminalSeen && (idle || isUpstreamReadError(error))) {
      const healed = await this.heal(idle ? 'idle-timeout' : 'read-error')
      if (healed !== undefined) return healed
      await this.flushHeld()
    }
    return endAfterReadFailure(error, stop, this.reader, tracker, this.out, () => this.atEof())
  }

  /** At the upstream's end the hot path hands over: a last frame may be one the end cut. */
  async framesToEnd(): Promise<PumpEnd> {
    const { tracker, gate } = this.options
    const { encoder, reader } = this
    for (;;) {
      let frame: SseFrame | null
      try {
        frame = await nextOn(reader, this.stop)
      } catch (error) {
        return this.afterReadFailure(error)
      }
      // A last frame the body's end cut goes out whole, or not at all (a cut, told).
      const whole =
        frame === null || frame.terminated ? frame : terminatedFrame(frame, tracker.adapter)
      if (whole === null) return this.atEof(frame !== null)
      const arrived = this.arrived()
      const { batch, kinds, clientEnded } = takeBatch(
        whole,
        reader,
        tracker,
        this.watchdog,
        arrived,
      )
      if (this.held !== undefined) await this.flushHeld()
      if (
        this.holdsCloses() &&
        !clientEnded &&
        kinds.at(-1) === 'meta' &&
        closedBlock(batch.at(-1) as SseFrame, tracker) !== undefined
      ) {
        this.held = batch.pop()
        kinds.pop()
        if (batch.length === 0) continue
      }
      if (batch.length === 1 || !encoder.raw || kinds.includes('error')) {
        for (let index = 0; index < batch.length; index++) {
          await this.write(batch[index] as SseFrame, kinds[index])
        }
      } else {
        const joined = this.redacted(joinRaw(batch), kinds.includes('error'))
        encoder.sentRaw(joined)
        await this.send(gate.write(joined))
        this.frames += batch.length
      }
      if (clientEnded) return this.atClientEnd()
    }
  }
}

/** {@link pump} with its policy already checked (`deliver` checks it before the peek). */
export async function pumpOn(
  options: PumpInput,
  policy: ReturnType<typeof normalizePumpPolicy>,
): Promise<PumpOutcome> {
  const run = new PumpRun(options, policy)
  let end: PumpEnd
  try {
    end = await run.run()
  } catch (error) {
    run.translator?.abort(error)
    end = await endOfThrow(error, options.signal, run.reader)
  } finally {
    run.unwatch()
  }
  // A host that aborts on the response's `close` event hears of a client that left before the
  // sink does, and its abort comes first: the client leaving is what happened.
  const left = options.gate.failure
  if (end.kind === 'aborted' && left !== undefined) {
    const stalled = stallOf(left)
    end =
      stalled === undefined
        ? { kind: 'client-gone', error: left }
        : { kind: 'downstream-stalled', error: stalled }
  }
  const releasing = release(end, run.reader, options.gate)
  if (releasing !== undefined) await releasing
  return {
    end,
    eof: run.eof,
    frames: run.frames,
    bytes: options.gate.bytesWritten - run.bytesAtStart,
    stalls: { ...run.stalls },
    durationMs: now() - run.started,
  }
}
