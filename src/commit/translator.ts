/**
 * Whole-stream translators inside the pump: the translator a gateway already has (an async
 * function over frames, a `TransformStream`, a `Response → Response` function) is fed the
 * committed upstream frames, and what it yields goes to the client. When the upstream fails
 * after commit, the translator's input fails instead of ending, so a translator written the
 * natural way stops without a success ending, and the pump writes the honest ending in the
 * client's protocol from what the client actually got.
 *
 * @module
 */

import { UserCodeError } from '../errors.js'
import type { StreamAdapter } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'

/**
 * A gateway's translator over the whole stream: the committed upstream frames in (keep-alives
 * left out), the client's bytes or text out. Write it the natural way: iterate `frames` and
 * yield the client's events; when the upstream fails after commit, iterating `frames` throws,
 * so the translator stops without its success ending and the relay writes the honest ending
 * in the client's protocol.
 *
 * @example
 * async function* toAnthropic(frames) {
 *   for await (const frame of frames) yield translateChunk(frame)
 *   yield 'event: message_stop\ndata: {"type":"message_stop"}\n\n'
 * }
 *
 * @group Downstream
 */
export type FrameTranslator = (
  frames: AsyncIterable<SseFrame>,
  context: TranslatorContext,
) => AsyncIterable<Uint8Array | string>

/**
 * A gateway's translator from a `Response` to a `Response` (the shape of response
 * transformers in gateways such as `@musistudio/llms`). The `Response` it is given has the
 * committed upstream stream as its body; the relay reads the body of the one it returns (its
 * status and headers are not used: the client's head is the relay's). When the upstream fails
 * after commit, reading the given body errors. For a non-streaming request it is given the
 * upstream's whole answer instead (its 2xx status, its `content-type`, the JSON body), and
 * the client gets the body of the `Response` it returns, with that response's
 * `content-type` (`application/json` when it sets none).
 *
 * @group Downstream
 */
export type ResponseTranslator = (response: Response) => Response | Promise<Response>

/**
 * A gateway's translator as a `TransformStream` (upstream bytes in, the client's bytes or text
 * out): a function making a fresh one per request, since a stream is used once.
 *
 * @group Downstream
 */
export type StreamTranslator = () => TransformStream<Uint8Array, Uint8Array | string>

/**
 * What a {@link FrameTranslator} is handed.
 *
 * @group Downstream
 */
export interface TranslatorContext {
  /** The upstream's adapter (what the frames are). */
  readonly upstream: StreamAdapter
  /** The client's adapter. */
  readonly client: StreamAdapter
}

/** The translator given, in one of its three shapes. */
export type AnyTranslator =
  | { readonly kind: 'frames'; readonly translate: FrameTranslator }
  | { readonly kind: 'stream'; readonly translate: StreamTranslator }
  | { readonly kind: 'response'; readonly translate: ResponseTranslator }

/** Frames the translator may be behind before the pump waits for it. */
const queuedFrames = 16

/**
 * The committed frames, handed to the translator in order: a bounded queue the pump pushes
 * into (waiting when the translator is `queuedFrames` behind) and the translator iterates.
 */
class FrameQueue implements AsyncIterable<SseFrame> {
  private readonly items: SseFrame[] = []
  private ended = false
  private failure: { readonly error: unknown } | undefined
  /** The translator stopped reading: what is pushed after is dropped. */
  private abandoned = false
  private wakeReader: (() => void) | undefined
  private wakeWriter: (() => void) | undefined

  /** Adds a frame; a promise when the queue is full (resolved once there is room). */
  push(frame: SseFrame): Promise<void> | undefined {
    if (this.abandoned || this.ended) return undefined
    this.items.push(frame)
    this.wake()
    if (this.items.length < queuedFrames) return undefined
    return new Promise((resolve) => {
      this.wakeWriter = resolve
    })
  }

  end(): void {
    this.ended = true
    this.wake()
  }

  fail(error: unknown): void {
    if (this.ended) return
    this.failure = { error }
    this.ended = true
    this.wake()
  }

  /** Lets a waiting pusher go (the translator is gone or failed). */
  release(): void {
    this.abandoned = true
    this.items.length = 0
    this.wakeWriter?.()
    this.wakeWriter = undefined
  }

  private wake(): void {
    this.wakeReader?.()
    this.wakeReader = undefined
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<SseFrame> {
    try {
      for (;;) {
        const frame = this.items.shift()
        if (frame !== undefined) {
          if (this.items.length < queuedFrames) {
            this.wakeWriter?.()
            this.wakeWriter = undefined
          }
          yield frame
          continue
        }
        if (this.failure !== undefined) throw this.failure.error
        if (this.ended) return
        await new Promise<void>((resolve) => {
          this.wakeReader = resolve
        })
      }
    } finally {
      this.release()
    }
  }

  /** The frames' bytes as a stream (errors when the queue fails; cancelling abandons it). */
  bytes(): ReadableStream<Uint8Array> {
    const frames = this[Symbol.asyncIterator]()
    return new ReadableStream<Uint8Array>({
      async pull(controller) {
        const next = await frames.next()
        if (next.done === true) controller.close()
        else controller.enqueue(next.value.raw)
      },
      async cancel() {
        await frames.return(undefined)
      },
    })
  }
}

const textEncoder = new TextEncoder()

/** What a translator yielded, as bytes; anything else is the translator's fault. */
function bytesOf(chunk: unknown, name: string): Uint8Array {
  if (typeof chunk === 'string') return textEncoder.encode(chunk)
  if (chunk instanceof Uint8Array) return chunk
  throw new UserCodeError(
    name,
    new TypeError(`yielded ${chunk === null ? 'null' : typeof chunk}, not bytes or text`),
  )
}

/** The option that names a translator, for errors. */
const optionName = {
  frames: 'downstream.translateFrames',
  stream: 'downstream.translateStream',
  response: 'downstream.translateResponse',
} as const

/** The translator's output, started over the queue. */
async function outputOf(
  translator: AnyTranslator,
  queue: FrameQueue,
  context: TranslatorContext,
): Promise<AsyncIterable<unknown>> {
  switch (translator.kind) {
    case 'frames':
      return translator.translate(queue, context)
    case 'stream': {
      const stream = translator.translate()
      // Errors reach the readable side; the pipe's own rejection says nothing more.
      queue
        .bytes()
        .pipeTo(stream.writable)
        .catch(() => {})
      return readAll(stream.readable)
    }
    case 'response': {
      const input = new Response(queue.bytes(), {
        status: 200,
        headers: { 'content-type': 'text/event-stream' },
      })
      const output = await translator.translate(input)
      if (!(output instanceof Response)) {
        throw new TypeError(`returned ${typeof output}, not a Response`)
      }
      return readAll(output.body ?? new ReadableStream({ start: (c) => c.close() }))
    }
  }
}

/** A stream's chunks, read with a reader (async iteration of streams is not everywhere). */
async function* readAll(stream: ReadableStream<unknown>): AsyncGenerator<unknown> {
  const reader = stream.getReader()
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      yield value
    }
  } finally {
    await reader.cancel().catch(() => {})
  }
}

/**
 * A translator running alongside the pump: `push` hands it a frame (and rethrows what stopped
 * it: its own throw, or a failed write to the client); `finish` ends its input cleanly
 * (`end`) or with a failure (`fail`) and waits until all it wrote is out; `abort` drops it.
 */
export interface TranslatorRun {
  push(frame: SseFrame): Promise<void> | undefined
  finish(how: 'end' | 'fail', reason?: unknown): Promise<void>
  abort(reason: unknown): void
}

/**
 * Starts `translator` over the committed frames; `write` sends what it yields to the client
 * (through the gate, watched for stalls, seen by the client's tracker).
 */
export function startTranslator(
  translator: AnyTranslator,
  context: TranslatorContext,
  write: (bytes: Uint8Array) => Promise<void>,
): TranslatorRun {
  const queue = new FrameQueue()
  const name = optionName[translator.kind]
  let failed: { readonly error: unknown } | undefined
  let inputFailed = false
  let aborted = false
  const task = (async () => {
    let output: AsyncIterable<unknown>
    try {
      output = await outputOf(translator, queue, context)
    } catch (error) {
      throw new UserCodeError(name, error)
    }
    const iterator = output[Symbol.asyncIterator]()
    for (;;) {
      let next: IteratorResult<unknown>
      try {
        next = await iterator.next()
      } catch (error) {
        throw new UserCodeError(name, error)
      }
      if (next.done === true) return
      const bytes = bytesOf(next.value, name)
      // Once dropped, nothing more of it reaches the client (the relay is ending the stream).
      if (aborted) return
      if (bytes.length > 0) await write(bytes)
    }
  })().then(
    () => {
      queue.release()
    },
    (error: unknown) => {
      queue.release()
      // A translator that stops because its input failed did as it should.
      if (!inputFailed) failed = { error }
    },
  )
  return {
    push(frame) {
      if (failed !== undefined) throw failed.error
      const waiting = queue.push(frame)
      if (waiting === undefined) return undefined
      return waiting.then(() => {
        if (failed !== undefined) throw failed.error
      })
    },
    async finish(how, reason) {
      if (how === 'fail') {
        inputFailed = true
        queue.fail(reason ?? new Error('the upstream stream failed'))
      } else queue.end()
      await task
      if (failed !== undefined) throw failed.error
    },
    abort(reason) {
      aborted = true
      inputFailed = true
      queue.fail(reason)
      queue.release()
    },
  }
}

/** A whole (non-streaming) answer: what the upstream sent, or what the client gets. */
export interface WholeAnswer {
  readonly bytes: Uint8Array
  readonly contentType: string
}

/** The most of a body read whole, or a `RangeError` past `limit`. */
async function readUpTo(body: ReadableStream<Uint8Array> | null, limit: number) {
  if (body === null) return new Uint8Array(0)
  const reader = body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      size += value.byteLength
      if (size > limit) throw new RangeError(`answered more than ${limit} bytes`)
      chunks.push(value)
    }
  } finally {
    await reader.cancel().catch(() => {})
  }
  const bytes = new Uint8Array(size)
  let at = 0
  for (const chunk of chunks) {
    bytes.set(chunk, at)
    at += chunk.byteLength
  }
  return bytes
}

/**
 * A whole (non-streaming) answer through a gateway's `Response → Response` translator (the
 * only shape that can be given one: the others read SSE frames). It is given the upstream's
 * status, content type and JSON bytes, and the client gets the body of the `Response` it
 * returns, read whole (at most `limit` bytes), with its content type (`application/json` when
 * it sets none); the status stays the upstream's, as for a stream. A translator that throws,
 * returns no `Response` or answers past the bound fails as `downstream.translateResponse`.
 */
export async function translateWholeAnswer(
  translate: ResponseTranslator,
  status: number,
  answer: WholeAnswer,
  limit: number,
): Promise<WholeAnswer> {
  try {
    const input = new Response(answer.bytes as Uint8Array<ArrayBuffer>, {
      status,
      headers: { 'content-type': answer.contentType },
    })
    const output = await translate(input)
    if (!(output instanceof Response)) {
      throw new TypeError(`returned ${typeof output}, not a Response`)
    }
    return {
      bytes: await readUpTo(output.body, limit),
      contentType: output.headers.get('content-type') ?? 'application/json',
    }
  } catch (error) {
    throw new UserCodeError(optionName.response, error)
  }
}
