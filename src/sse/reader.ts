/**
 * The async frame reader: pulls chunks from a `ReadableStream` or an `AsyncIterable` into a
 * {@link FrameSplitter}. The reader is a plain object; handing it from a peek phase to a
 * pump hands over everything it buffered.
 *
 * @module
 */

import { FrameTooLargeError, ReaderBusyError, UpstreamReadError } from '../errors.js'
import { positiveInteger } from '../options.js'
import type { SseFrame } from './frame.js'
import { FrameSplitter } from './splitter.js'

/** Options of {@link createFrameReader}. */
export interface FrameReaderOptions {
  /**
   * The largest frame, in bytes, the reader will hold. A frame growing past it makes
   * `next()` reject with {@link FrameTooLargeError}; the reader then holds nothing more.
   * @default 1_048_576 (1 MiB)
   * @example createFrameReader(body, { maxFrameBytes: 256 * 1024 })
   */
  maxFrameBytes?: number
}

/** Defaults of {@link FrameReaderOptions}. */
export const frameReaderDefaults: Readonly<Required<FrameReaderOptions>> = Object.freeze({
  maxFrameBytes: 1_048_576,
})

/** Options of {@link FrameReader.next}. */
export interface NextFrameOptions {
  /**
   * Aborting rejects the pending `next()` with `signal.reason`. Bytes of a half-read frame
   * stay buffered, and a chunk still being read is kept for the next call: nothing is lost.
   */
  signal?: AbortSignal
}

/** Reads whole SSE frames from one upstream body. Create it once per body. */
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

/** Where the reader pulls bytes from. */
export type FrameSource = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>

type Pull = { done: true; value?: undefined } | { done: false; value: Uint8Array }

interface Puller {
  pull(): Promise<Pull>
  release(reason: unknown): Promise<void>
}

function toPuller(source: FrameSource): Puller {
  if (typeof (source as ReadableStream<Uint8Array>).getReader === 'function') {
    const reader = (source as ReadableStream<Uint8Array>).getReader()
    return {
      pull: () => reader.read() as Promise<Pull>,
      release: async (reason) => {
        await reader.cancel(reason).catch(() => {})
      },
    }
  }
  const iterator = (source as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]()
  return {
    pull: () => iterator.next() as Promise<Pull>,
    release: async () => {
      await iterator.return?.().catch(() => {})
    },
  }
}

function normalizeOptions(options: FrameReaderOptions | undefined): Required<FrameReaderOptions> {
  const maxFrameBytes = options?.maxFrameBytes ?? frameReaderDefaults.maxFrameBytes
  return { maxFrameBytes: positiveInteger('maxFrameBytes', maxFrameBytes) }
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError')
}

class Reader implements FrameReader {
  readonly #splitter: FrameSplitter
  readonly #puller: Puller
  /** A pull that an abort left unfinished; the next call takes its result. */
  #pending: Promise<Pull> | undefined
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
    if (this.#busy) throw new ReaderBusyError()
    if (this.#failure !== undefined) throw this.#failure
    try {
      return this.#splitter.take()
    } catch (error) {
      this.#fail(error)
      throw error
    }
  }

  next(options?: NextFrameOptions): Promise<SseFrame | null> {
    if (this.#busy) return Promise.reject(new ReaderBusyError())
    const signal = options?.signal
    if (signal?.aborted) return Promise.reject(abortReason(signal))
    if (this.#failure !== undefined) return Promise.reject(this.#failure)
    // Fast path: a whole frame is already buffered (many frames per chunk).
    let frame: SseFrame | null
    try {
      frame = this.#splitter.take()
    } catch (error) {
      this.#fail(error)
      return Promise.reject(error)
    }
    if (frame !== null) return Promise.resolve(frame)
    return this.#read(signal)
  }

  async #read(signal: AbortSignal | undefined): Promise<SseFrame | null> {
    this.#busy = true
    try {
      for (;;) {
        if (this.#ended || this.#released) return this.#settle(() => this.#splitter.finish())
        let result: Pull
        if (signal !== undefined) {
          result = await this.#pullOrAbort(signal)
        } else {
          const pending = this.#pending
          this.#pending = undefined
          try {
            result = await (pending ?? this.#puller.pull())
          } catch (error) {
            if (error instanceof UpstreamReadError) throw error
            return this.#readFailed(error)
          }
        }
        if (result.done) {
          this.#ended = true
          this.#unwatch()
          continue
        }
        this.#bytesRead += result.value.length
        this.#splitter.push(result.value)
        const frame = this.#settle(() => this.#splitter.take())
        if (frame !== null) return frame
      }
    } finally {
      this.#busy = false
    }
  }

  #settle(step: () => SseFrame | null): SseFrame | null {
    try {
      return step()
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

  #readFailed(error: unknown): never {
    const failure = new UpstreamReadError(error)
    this.#failure = failure
    this.#ended = true
    this.#unwatch()
    throw failure
  }

  /** The signal whose abort listener is installed, and the pull it would interrupt. */
  #watched: AbortSignal | undefined
  #interrupt: ((reason: unknown) => void) | undefined
  readonly #onAbort = () => {
    const signal = this.#watched
    if (signal !== undefined) this.#interrupt?.(abortReason(signal))
  }

  /**
   * Pulls a chunk, but an abort leaves the pull pending for the next call: nothing is lost.
   * One listener stays on the signal across calls (a pump passes the same one every frame).
   */
  #pullOrAbort(signal: AbortSignal): Promise<Pull> {
    if (this.#watched !== signal) {
      this.#watched?.removeEventListener('abort', this.#onAbort)
      this.#watched = signal
      signal.addEventListener('abort', this.#onAbort)
    }
    if (this.#pending === undefined) {
      const pending = this.#puller.pull().catch((error: unknown) => this.#readFailed(error))
      // Keeps a failure after an abort from being reported as unhandled; awaiters still see it.
      pending.catch(() => {})
      this.#pending = pending
    }
    const pending = this.#pending
    return new Promise<Pull>((resolve, reject) => {
      // Each call owns its interrupt: a pull that an earlier, interrupted call left behind
      // must not settle this one's.
      const interrupt = (reason: unknown) => {
        if (this.#interrupt === interrupt) this.#interrupt = undefined
        reject(reason)
      }
      this.#interrupt = interrupt
      pending.then(
        (result) => {
          if (this.#interrupt !== interrupt) return
          this.#interrupt = undefined
          this.#pending = undefined
          resolve(result)
        },
        (error: unknown) => {
          if (this.#interrupt !== interrupt) return
          this.#interrupt = undefined
          this.#pending = undefined
          reject(error)
        },
      )
      // The source itself may have aborted the signal while we asked it for a chunk.
      if (signal.aborted) interrupt(abortReason(signal))
    })
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
    this.#pending?.catch(() => {})
    this.#pending = undefined
    if (!this.#ended) await this.#puller.release(reason)
  }
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
 */
export function createFrameReader(source: FrameSource, options?: FrameReaderOptions): FrameReader {
  const { maxFrameBytes } = normalizeOptions(options)
  return new Reader(source, maxFrameBytes)
}
