/**
 * What a frame reader reads from: a web stream, a Node readable, or any async iterable of
 * bytes, each made a puller of chunks; and `iterableResponse`, a `Response` over an async
 * iterable that the reader reads without a web stream in between.
 *
 * @module
 */

import { settleWithin } from '../call-safely.js'

/**
 * Where the reader pulls bytes from.
 *
 * @group Frames
 */
export type FrameSource = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>

export type Pull = { done: true; value?: undefined } | { done: false; value: Uint8Array }

/**
 * Where chunks come from. `pull` calls back exactly once per call, with the next chunk or
 * the end, or with a failure; a source whose chunk is already there may call back at once.
 */
export interface Puller {
  pull(onResult: (result: Pull) => void, onError: (error: unknown) => void): void
  release(reason: unknown): Promise<void>
}

/**
 * Where `nodeResponse`'s body keeps its Node stream and how to let it go (`Symbol.for`: two
 * copies of the package agree), so the reader takes its chunks from `read()` on `readable`,
 * with no promise per chunk.
 */
const nodeReadable = Symbol.for('stream-boundary.nodeReadable')

/** What the reader uses of a Node `Readable` (an `IncomingMessage`). */
interface NodeReadableLike {
  read(): Uint8Array | null
  on(event: string, listener: (...args: never[]) => void): unknown
  off(event: string, listener: (...args: never[]) => void): unknown
  once(event: string, listener: (...args: never[]) => void): unknown
  /** `IncomingMessage.complete`: the whole message arrived. */
  readonly complete?: boolean
}

/** A Node stream as `nodeResponse` hands it over: the stream, and its release. */
interface NodeBody {
  readonly stream: NodeReadableLike
  release(): void
}

/**
 * Chunks from a Node stream's `read()`, waiting on `readable`: a chunk already buffered is
 * handed over at once, and a wait is a listener, not a promise. A stream closed before its
 * end (a reset, a cut connection) fails the read: a cut is never taken for a clean end.
 */
function readablePuller({ stream, release }: NodeBody): Puller {
  let waiting: [(result: Pull) => void, (error: unknown) => void] | undefined
  let ended = false
  let failure: unknown
  const hand = () => {
    const wait = waiting
    if (wait === undefined) return
    const chunk = stream.read()
    if (chunk !== null) {
      waiting = undefined
      wait[0]({ done: false, value: chunk })
    } else if (failure !== undefined) {
      waiting = undefined
      wait[1](failure)
    } else if (ended) {
      waiting = undefined
      wait[0]({ done: true })
    }
  }
  stream.on('readable', hand)
  stream.once('end', () => {
    ended = true
    hand()
  })
  stream.on('error', (error: unknown) => {
    failure ??= error
    hand()
  })
  stream.once('close', () => {
    if (!ended && stream.complete !== true) {
      failure ??= new Error('the upstream response was closed before its end')
    }
    hand()
  })
  return {
    pull(onResult, onError) {
      waiting = [onResult, onError]
      hand()
    },
    release: async () => {
      stream.off('readable', hand)
      release()
    },
  }
}

export function toPuller(source: FrameSource): Puller {
  if (typeof (source as ReadableStream<Uint8Array>).getReader === 'function') {
    const reader = (source as ReadableStream<Uint8Array>).getReader()
    return {
      pull: (onResult, onError) => {
        ;(reader.read() as Promise<Pull>).then(onResult, onError)
      },
      // The stream closes at once (a read in flight ends); its source's `cancel()` is user
      // code, waited for a short grace only.
      release: (reason) => settleWithin(reader.cancel(reason)),
    }
  }
  const node = (source as { [nodeReadable]?: NodeBody })[nodeReadable]
  if (node !== undefined) return readablePuller(node)
  const iterator = (source as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]()
  return {
    pull: (onResult, onError) => {
      try {
        ;(iterator.next() as Promise<Pull>).then(onResult, onError)
      } catch (error) {
        onError(error)
      }
    },
    // An iterator's `return()` waits for a `next()` in flight (a generator stalled in an
    // `await` never gets to it): waited for a short grace only.
    release: () => {
      try {
        return settleWithin(iterator.return?.())
      } catch {
        return Promise.resolve()
      }
    },
  }
}

/** Where {@link iterableResponse} keeps the body it was given (`Symbol.for`: two copies of the package agree). */
export const iterableBody = Symbol.for('stream-boundary.iterableBody')

/** A web stream over an async iterable, for a reader of an {@link iterableResponse}'s `body`. */
export function streamOver(source: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  let iterator: AsyncIterator<Uint8Array> | undefined
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        iterator ??= source[Symbol.asyncIterator]()
        const { done, value } = await iterator.next()
        if (done) controller.close()
        else controller.enqueue(value)
      },
      async cancel() {
        await (iterator ?? source[Symbol.asyncIterator]()).return?.()
      },
    },
    { highWaterMark: 0 },
  )
}

/** A `Response` whose body's web stream is made only when something asks for it. */
class IterableBodyResponse extends Response {
  readonly #source: AsyncIterable<Uint8Array>
  #stream: ReadableStream<Uint8Array> | undefined

  constructor(source: AsyncIterable<Uint8Array>, init: ResponseInit | undefined) {
    super(null, init)
    // Accessors on the class, not properties defined on each instance (which would leave
    // every response in V8's slow dictionary mode).
    this.#source = source
  }

  override get body(): ReadableStream<Uint8Array<ArrayBuffer>> {
    this.#stream ??= streamOver(this.#source)
    return this.#stream as ReadableStream<Uint8Array<ArrayBuffer>>
  }

  get [iterableBody](): AsyncIterable<Uint8Array> {
    return this.#source
  }

  override text(): Promise<string> {
    return new Response(this.body).text()
  }

  override async json(): Promise<unknown> {
    return JSON.parse(await this.text())
  }

  override arrayBuffer(): Promise<ArrayBuffer> {
    return new Response(this.body).arrayBuffer()
  }

  override blob(): Promise<Blob> {
    return new Response(this.body).blob()
  }
}

/**
 * A `Response` whose body is an `AsyncIterable<Uint8Array>` (a Node `IncomingMessage`, say),
 * for an attempt function that reads its upstream without `fetch`: the relay's frame reader
 * iterates `body` directly, with no web stream in between. `response.body`, `text()`, `json()`,
 * `arrayBuffer()` and `blob()` work too, through a web stream made over `body` when first
 * asked for. Read the body once, one way (`clone()` and `bodyUsed` do not see it).
 *
 * @example
 * http.request(url, options, (res) => {
 *   resolve(iterableResponse(res, { status: res.statusCode, headers: headersOf(res) }))
 * })
 *
 * @group Frames
 */
export function iterableResponse(body: AsyncIterable<Uint8Array>, init?: ResponseInit): Response {
  return new IterableBodyResponse(body, init)
}

/** What a frame reader should read of `response`: its iterable body when it has one. */
export function frameSourceOf(response: Response): FrameSource | null {
  return (response as { [iterableBody]?: FrameSource })[iterableBody] ?? response.body
}
