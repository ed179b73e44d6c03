/**
 * The frame reader: whole SSE frames with their exact bytes, read from any byte source, with
 * a hot path that hands a chunk's frames over where the chunk lands.
 *
 * @module
 */

import { FrameTooLargeError, ReaderBusyError, UpstreamReadError } from '../errors.js'
import { countNormalization, positiveInteger, rejectUnknownKeys } from '../options.js'
import { realSignal, type SignalLike } from '../stop.js'
import type { SseFrame } from './frame.js'
import { type FrameSource, type Pull, type Puller, toPuller } from './sources.js'
import { FrameSplitter } from './splitter.js'

/**
 * Options of {@link createFrameReader}.
 *
 * @group Frames
 */
export interface FrameReaderOptions {
  /**
   * The largest frame, in bytes, the reader will hold. A frame growing past it makes
   * `next()` reject with {@link FrameTooLargeError}; the reader then holds nothing more.
   * @default 1_048_576 (1 MiB)
   * @example createFrameReader(body, { maxFrameBytes: 256 * 1024 })
   */
  maxFrameBytes?: number
}

/**
 * Defaults of {@link FrameReaderOptions}.
 *
 * @group Frames
 */
export const frameReaderDefaults: Readonly<Required<FrameReaderOptions>> = Object.freeze({
  maxFrameBytes: 1_048_576,
})

/**
 * Options of {@link FrameReader.next}.
 *
 * @group Frames
 */
export interface NextFrameOptions {
  /**
   * Aborting rejects the pending `next()` with `signal.reason`. Bytes of a half-read frame
   * stay buffered, and a chunk still being read is kept for the next call: nothing is lost.
   */
  signal?: AbortSignal
}

/**
 * Reads whole SSE frames from one upstream body. Create it once per body.
 *
 * @group Frames
 */
export interface FrameReader {
  /**
   * Resolves to the next whole frame, or `null` at end of stream. Rejects with the signal's
   * reason on abort, {@link FrameTooLargeError} for an oversized frame, or
   * {@link UpstreamReadError} when the body fails. Calls must not overlap.
   */
  next(options?: NextFrameOptions): Promise<SseFrame | null>
  /**
   * The next frame if a whole one is already buffered, else `null`, synchronously and without
   * reading from the upstream. A pump uses it to write the frames of one upstream chunk in
   * one write. Throws what `next()` would reject with for a buffered frame.
   */
  takeBuffered(): SseFrame | null
  /** Releases the upstream (cancels the stream or returns the iterator) and drops the buffer. */
  cancel(reason?: unknown): Promise<void>
  /** Bytes read from the upstream but not yet returned as frames. */
  readonly bufferedBytes: number
  /** All bytes read from the upstream so far. */
  readonly bytesRead: number
  /** True once the upstream ended, failed or was cancelled. */
  readonly done: boolean
}

function normalizeOptions(options: FrameReaderOptions | undefined): Required<FrameReaderOptions> {
  countNormalization('createFrameReader')
  rejectUnknownKeys('createFrameReader', options, [
    'maxFrameBytes',
  ] satisfies (keyof FrameReaderOptions)[])
  const maxFrameBytes = options?.maxFrameBytes ?? frameReaderDefaults.maxFrameBytes
  return { maxFrameBytes: positiveInteger('maxFrameBytes', maxFrameBytes) }
}

function abortReason(signal: SignalLike): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError')
}

/** A pull that settled while no call waited for it (an abort interrupted the wait). */
type Settled =
  | { readonly ok: true; readonly value: Pull }
  | { readonly ok: false; readonly error: unknown }

class Reader implements FrameReader {
  readonly #splitter: FrameSplitter
  readonly #puller: Puller
  /** The pull in flight; its result goes to the waiting call, or to `#settled` when none waits. */
  #pulling = false
  #settled: Settled | undefined
  /** The call waiting on the pull in flight. */
  #resolveWait: ((result: Pull) => void) | undefined
  #rejectWait: ((reason: unknown) => void) | undefined
  #ended = false
  #released = false
  #failure: unknown
  #busy = false
  #bytesRead = 0

  constructor(source: FrameSource, maxFrameBytes: number) {
    this.#splitter = new FrameSplitter(maxFrameBytes)
    this.#puller = toPuller(source)
  }

  get bufferedBytes(): number {
    return this.#splitter.bufferedBytes
  }

  get bytesRead(): number {
    return this.#bytesRead
  }

  get done(): boolean {
    return this.#ended || this.#released
  }

  takeBuffered(): SseFrame | null {
    this.#checkTake()
    return this.#settle(false) as SseFrame | null
  }

  /** {@link takeBuffered} as bytes only (see {@link RawFrameReader}). */
  takeBufferedRaw(): Uint8Array | null {
    this.#checkTake()
    return this.#settle(true) as Uint8Array | null
  }

  #checkTake(): void {
    if (this.#busy) throw new ReaderBusyError()
    if (this.#failure !== undefined) throw this.#failure
  }

  next(options?: NextFrameOptions): Promise<SseFrame | null> {
    return this.#next(options?.signal, false) as Promise<SseFrame | null>
  }

  nextOn(signal: SignalLike | undefined): Promise<SseFrame | null> {
    return this.#next(signal, false) as Promise<SseFrame | null>
  }

  /** {@link next} as bytes only (see {@link RawFrameReader}). */
  nextRaw(signal?: SignalLike): Promise<Uint8Array | null> {
    return this.#next(signal, true) as Promise<Uint8Array | null>
  }

  #next(signal: SignalLike | undefined, raw: boolean): Promise<SseFrame | Uint8Array | null> {
    if (this.#busy) return Promise.reject(new ReaderBusyError())
    if (signal?.aborted) return Promise.reject(abortReason(signal))
    if (this.#failure !== undefined) return Promise.reject(this.#failure)
    // Fast path: a whole frame is already buffered (many frames per chunk).
    let frame: SseFrame | Uint8Array | null
    try {
      frame = this.#settle(raw)
    } catch (error) {
      return Promise.reject(error)
    }
    if (frame !== null) return Promise.resolve(frame)
    // At the end: the last frame (one the end cut, or none) at once, with no `async` step.
    if (this.#ended || this.#released) {
      if (raw) return Promise.resolve(null)
      try {
        return Promise.resolve(this.#finish())
      } catch (error) {
        return Promise.reject(error)
      }
    }
    return this.#read(signal, raw)
  }

  /**
   * {@link RawFrameReader.pumpRaw}: the frames of each pulled chunk go to `take` where the
   * chunk lands, and the next pull starts at once unless `take` returned a promise (the sink
   * pushed back): no promise per chunk of its own. During `take` the reader is idle, so `take`
   * may take the chunk's further frames with `takeBufferedRaw`.
   */
  pumpRaw(
    signal: SignalLike | undefined,
    take: (frame: Uint8Array) => Promise<void> | undefined,
  ): Promise<{ readonly failed: unknown } | null> {
    if (this.#busy) return Promise.reject(new ReaderBusyError())
    if (signal?.aborted) return Promise.reject(abortReason(signal))
    if (this.#failure !== undefined) return Promise.reject(this.#failure)
    this.#busy = true
    return new Promise((resolve, reject) => {
      const end = (value: { readonly failed: unknown } | null) => {
        this.#busy = false
        resolve(value)
      }
      const fail = (reason: unknown) => {
        this.#busy = false
        reject(reason)
      }
      const writeFailed = (error: unknown) => end({ failed: error })
      /** Hands over the whole frames held, until one waits on the sink; then pulls. */
      const drain = (): void => {
        this.#busy = true
        for (;;) {
          let frame: Uint8Array | null
          try {
            frame = this.#settle(true) as Uint8Array | null
          } catch (error) {
            fail(error)
            return
          }
          if (frame === null) break
          let written: Promise<void> | undefined
          this.#busy = false
          try {
            written = take(frame)
          } catch (error) {
            end({ failed: error })
            return
          }
          this.#busy = true
          if (written !== undefined) {
            written.then(drain, writeFailed)
            return
          }
        }
        if (this.#ended || this.#released) {
          end(null)
          return
        }
        if (this.#takeSettled(signal, onPull, fail)) return
        this.#resolveWait = onPull
        this.#rejectWait = fail
        if (signal?.aborted) {
          this.#onAbort()
          return
        }
        this.#ensurePull()
      }
      const onPull = (result: Pull): void => {
        if (result.done) {
          this.#ended = true
          this.#unwatch()
          end(null)
          return
        }
        this.#bytesRead += result.value.length
        this.#splitter.push(result.value)
        drain()
      }
      drain()
    })
  }

  /**
   * Pulls until a whole frame is buffered, or the end. One promise per call: the waits are
   * the puller's callbacks (not an `async` function and an `await` per pull).
   */
  #read(signal: SignalLike | undefined, raw: boolean): Promise<SseFrame | Uint8Array | null> {
    this.#busy = true
    return new Promise((resolve, reject) => {
      const settle = (value: SseFrame | Uint8Array | null) => {
        this.#busy = false
        resolve(value)
      }
      const fail = (reason: unknown) => {
        this.#busy = false
        reject(reason)
      }
      const onPull = (result: Pull): void => {
        try {
          if (result.done) {
            this.#ended = true
            this.#unwatch()
            // The last frame may be one end of stream cut: only a frame object can say so.
            settle(raw ? null : this.#finish())
            return
          }
          this.#bytesRead += result.value.length
          this.#splitter.push(result.value)
          const frame = this.#settle(raw)
          if (frame !== null) {
            settle(frame)
            return
          }
        } catch (error) {
          fail(error)
          return
        }
        pull()
      }
      const pull = (): void => {
        if (this.#released) {
          try {
            settle(raw ? null : this.#finish())
          } catch (error) {
            fail(error)
          }
          return
        }
        if (this.#takeSettled(signal, onPull, fail)) return
        this.#wait(onPull, fail)
        if (this.#resolveWait !== undefined) this.#ensurePull()
      }
      pull()
    })
  }

  /** The next buffered frame (as bytes when `raw`); a failure is kept and rethrown. */
  #settle(raw: boolean): SseFrame | Uint8Array | null {
    try {
      return raw ? this.#splitter.takeRaw() : this.#splitter.take()
    } catch (error) {
      this.#fail(error)
      throw error
    }
  }

  #finish(): SseFrame | null {
    try {
      return this.#splitter.finish()
    } catch (error) {
      this.#fail(error)
      throw error
    }
  }

  #fail(error: unknown): void {
    this.#failure = error
    this.#splitter.clear()
    void this.cancel(error)
  }

  /** The signal whose abort listener is installed. */
  #watched: SignalLike | undefined
  readonly #onAbort = () => {
    const signal = this.#watched
    const reject = this.#rejectWait
    if (signal === undefined || reject === undefined) return
    // The pull stays in flight: the next call takes its result, so nothing is lost.
    this.#resolveWait = this.#rejectWait = undefined
    reject(abortReason(signal))
  }

  /**
   * Watches `signal` for this read, and hands it what the pull in flight gave before anyone
   * waited (a value or a failure): `true` when it did.
   */
  #takeSettled(
    signal: SignalLike | undefined,
    onPull: (result: Pull) => void,
    fail: (reason: unknown) => void,
  ): boolean {
    this.#watch(signal)
    const settled = this.#settled
    if (settled === undefined) return false
    this.#settled = undefined
    if (settled.ok) onPull(settled.value)
    else fail(settled.error)
    return true
  }

  #watch(signal: SignalLike | undefined): void {
    if (this.#watched === signal) return
    this.#unwatch()
    this.#watched = signal
    signal?.addEventListener('abort', this.#onAbort)
  }

  /** Starts a pull unless one is in flight. Its result may come at once: wait first. */
  #ensurePull(): void {
    if (this.#pulling) return
    this.#pulling = true
    this.#puller.pull(this.#onPulled, this.#onPullFailed)
  }

  readonly #wait = (resolve: (result: Pull) => void, reject: (reason: unknown) => void) => {
    this.#resolveWait = resolve
    this.#rejectWait = reject
    // The source itself may have aborted the signal while we asked it for a chunk.
    if (this.#watched?.aborted) this.#onAbort()
  }

  readonly #onPulled = (result: Pull) => {
    this.#pulling = false
    const resolve = this.#resolveWait
    if (resolve === undefined) {
      this.#settled = { ok: true, value: result }
      return
    }
    this.#resolveWait = this.#rejectWait = undefined
    resolve(result)
  }

  readonly #onPullFailed = (error: unknown) => {
    this.#pulling = false
    const failure = new UpstreamReadError(error)
    this.#failure = failure
    this.#ended = true
    this.#unwatch()
    const reject = this.#rejectWait
    if (reject === undefined) {
      this.#settled = { ok: false, error: failure }
      return
    }
    this.#resolveWait = this.#rejectWait = undefined
    reject(failure)
  }

  /** Removes the abort listener (a pull still in flight settles as usual). */
  #unwatch(): void {
    this.#watched?.removeEventListener('abort', this.#onAbort)
    this.#watched = undefined
  }

  async cancel(reason?: unknown): Promise<void> {
    if (this.#released) return
    this.#released = true
    this.#unwatch()
    this.#splitter.clear()
    this.#settled = undefined
    if (!this.#ended) await this.#puller.release(reason)
  }
}

/**
 * A reader this module made, seen by the pump: frames as their bytes only, with no frame
 * object, for the relay's hot path after commit. Internal: not exported from the package.
 */
export interface RawFrameReader extends FrameReader {
  /**
   * The next whole frame's bytes; `null` when the upstream ended (call `next()` then: it
   * returns a last frame the end cut, or `null`). Valid only past the first frame.
   */
  nextRaw(signal?: SignalLike): Promise<Uint8Array | null>
  /** {@link FrameReader.takeBuffered} as bytes only. */
  takeBufferedRaw(): Uint8Array | null
  /**
   * Reads on past the first frame, handing each whole frame's bytes to `take` as soon as it
   * is whole, with no promise per frame: when `take` returns a promise (the sink pushed
   * back), reading waits for it. Resolves with `null` at the upstream's end (call `next()`
   * then, as after `nextRaw` gave `null`), or with `{ failed }` when `take` threw or its
   * promise rejected; rejects as `nextRaw` does (a read failure, `signal` aborted; the pull
   * in flight stays for the next read). During `take` the reader is idle: `take` may call
   * `takeBufferedRaw`.
   */
  pumpRaw(
    signal: SignalLike | undefined,
    take: (frame: Uint8Array) => Promise<void> | undefined,
  ): Promise<{ readonly failed: unknown } | null>
}

/**
 * `reader.next()` stopped by `signal`, which may be a library-made stop: a reader made here
 * takes it as it is, another is handed a real `AbortSignal`.
 */
export function nextOn(reader: FrameReader, signal: SignalLike): Promise<SseFrame | null> {
  return reader instanceof Reader
    ? reader.nextOn(signal)
    : reader.next({ signal: realSignal(signal) })
}

/** The reader as a {@link RawFrameReader}, when this module made it. */
export function rawFrameReader(reader: FrameReader): RawFrameReader | undefined {
  return reader instanceof Reader ? reader : undefined
}

/**
 * Creates a reader of whole SSE frames over an upstream body.
 *
 * Frames keep their exact bytes (`raw`), so relaying them loses and reorders nothing; the
 * parsed fields agree with `eventsource-parser`. The reader is the only consumer of its
 * source: pass the same reader from a peek phase to a pump, never make a second one.
 *
 * @example
 * const reader = createFrameReader(response.body)
 * for (let frame = await reader.next(); frame; frame = await reader.next()) {
 *   console.log(frame.event, frame.data)
 * }
 *
 * @group Frames
 */
export function createFrameReader(source: FrameSource, options?: FrameReaderOptions): FrameReader {
  const { maxFrameBytes } = normalizeOptions(options)
  return new Reader(source, maxFrameBytes)
}

/**
 * {@link createFrameReader} as the relay calls it: `maxFrameBytes` was checked when the relay
 * was built (guarantee 30: nothing is normalised again per attempt).
 */
export function frameReaderOn(source: FrameSource, maxFrameBytes: number): FrameReader {
  return new Reader(source, maxFrameBytes)
}
