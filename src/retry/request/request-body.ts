/**
 * Reading a request body that must be held (to send it again on a retry) without letting one
 * client make the process hold an unbounded amount: a declared `content-length` past the bound
 * is refused before a byte is read, and a streamed body is read no further than the bound.
 *
 * @module
 */

import { now } from '../../call-safely.js'
import { RequestBodyTooLargeError } from '../../errors.js'
import { positiveInteger } from '../../options.js'
import { joinBytes } from '../../protocols/bytes.js'
import type { StreamAdapter } from '../../protocols/types.js'
import {
  alreadyRead,
  type ClientBodyCheck,
  type ClientBodyRefusal,
  type ClientRequestRefusal,
  refusalOf,
  tooLarge,
  tooSlow,
} from './client-refusal.js'
import {
  checkClientBody,
  checkKeepClientBytes,
  checkParsedBody,
  clientErrorBody,
  defaultMaxJsonDepth,
  keepClientBytes,
  type ReaderLimits,
  readerLimits,
} from './client-request.js'

/**
 * Defaults of {@link ReadRequestBodyOptions}, {@link ReadClientRequestOptions} and
 * `readNodeRequest`'s options.
 *
 * @group Relay
 */
export const requestBodyDefaults: {
  readonly maxRequestBodyBytes: number
  readonly maxJsonDepth: number
  readonly requestBodyTimeoutMs: number
} = Object.freeze({
  // 32 MiB: Anthropic's Messages limit (32 MB). OpenAI takes up to 50 MB of images per
  // request and Gemini 20 MB of inline data; a bigger default would only let one client
  // make a gateway hold more than most upstreams accept.
  maxRequestBodyBytes: 32 * 1024 * 1024,
  maxJsonDepth: defaultMaxJsonDepth,
  // 60 s: a request of the 32 MiB bound at 4.5 Mbit/s; an LLM request of a few hundred KB
  // arrives in well under a second. Fastify's `requestTimeout` is 0 (none) by default.
  requestBodyTimeoutMs: 60_000,
})

/**
 * Options of {@link readRequestBody}.
 *
 * @group Relay
 */
export interface ReadRequestBodyOptions {
  /**
   * The most bytes a request body may have; past it the read stops with a
   * `RequestBodyTooLargeError`.
   * @default 33_554_432 (32 MiB)
   */
  readonly maxRequestBodyBytes?: number
  /** The request's `content-length`, if any: a declared size past the bound is refused at once. */
  readonly contentLength?: string | null | undefined
}

/**
 * Reads a request body into memory, at most `maxRequestBodyBytes` of it. Rejects with a
 * {@link RequestBodyTooLargeError} when the declared `content-length` or the bytes read pass
 * the bound. The stream is then left unread past the bound and unlocked, not cancelled: cancel
 * it if its producer should stop (on a Node server, cancelling the request stream resets the
 * connection before a `413` can be sent). Resolves to `undefined` for a `null` body.
 *
 * @example
 * const body = await readRequestBody(request.body, { contentLength: request.headers.get('content-length') })
 *
 * @group Relay
 */
export async function readRequestBody(
  body: ReadableStream<Uint8Array> | null,
  options: ReadRequestBodyOptions = {},
): Promise<Uint8Array | undefined> {
  const limit = positiveInteger(
    'maxRequestBodyBytes',
    options.maxRequestBodyBytes ?? requestBodyDefaults.maxRequestBodyBytes,
  )
  const declared = Number(options.contentLength ?? Number.NaN)
  if (Number.isFinite(declared) && declared > limit) throw new RequestBodyTooLargeError(limit)
  if (body === null) return undefined
  const reader = body.getReader()
  try {
    const bytes = await readWithin(reader, limit)
    if (bytes === undefined) throw new RequestBodyTooLargeError(limit)
    return bytes
  } finally {
    reader.releaseLock()
  }
}

/**
 * Reads a body to its end while it stays within `limit` bytes: its bytes, or `undefined` as
 * soon as it passes the bound (nothing more is read). A failed read rejects.
 */
export async function readWithin(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  limit: number,
): Promise<Uint8Array | undefined> {
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > limit) return undefined
    chunks.push(value)
  }
  return chunks.length === 0 ? new Uint8Array(0) : joinBytes(chunks)
}

/**
 * A client's body within the reader's bounds of size and time, or the refusal of what stopped
 * it. When the time runs out the reader is released, which rejects the read it waits on: one
 * timer, no promise per chunk, cleared on every path. A stream left unread is unlocked, not
 * cancelled (on a Node server, cancelling resets the connection before the answer is sent).
 */
async function readClientBytes(
  request: Request,
  limits: ReaderLimits,
): Promise<Uint8Array | ClientBodyRefusal> {
  const declared = Number(request.headers.get('content-length') ?? Number.NaN)
  if (Number.isFinite(declared) && declared > limits.maxRequestBodyBytes)
    return tooLarge(limits.maxRequestBodyBytes)
  if (request.body === null) return new Uint8Array(0)
  const reader = request.body.getReader()
  let timedOut = false
  const timer =
    limits.requestBodyTimeoutMs === Number.POSITIVE_INFINITY
      ? undefined
      : setTimeout(() => {
          timedOut = true
          reader.releaseLock()
        }, limits.requestBodyTimeoutMs)
  try {
    const bytes = await readWithin(reader, limits.maxRequestBodyBytes)
    return bytes ?? tooLarge(limits.maxRequestBodyBytes)
  } catch (error) {
    if (timedOut) return tooSlow(limits.requestBodyTimeoutMs)
    throw error
  } finally {
    clearTimeout(timer)
    if (!timedOut) reader.releaseLock()
  }
}

/**
 * Options of {@link readClientRequest}.
 *
 * @group Relay
 */
export interface ReadClientRequestOptions {
  /** The client's protocol: its checks, and the shape of a `400`/`413` answer. */
  readonly adapter: StreamAdapter
  /**
   * The most bytes a request body may have; past it the client gets `413`.
   * @default 33_554_432 (32 MiB)
   */
  readonly maxRequestBodyBytes?: number
  /**
   * Keep the client's bytes with the body read, and freeze the body (deeply): a ready attempt
   * (`fetchAttempt`, `nodeHttpAttempt`) that sends this very body — no `adjustRequest`, no
   * fallback's own body, no translation, no continuation — then sends the client's bytes as
   * they came (key order and spacing kept) instead of serialising the body again. To change
   * the request, build a new body (`{ ...read.body, model }`): changing a frozen one throws.
   * @default false
   * @example { adapter: openaiChat, keepClientBytes: true }
   */
  readonly keepClientBytes?: boolean
  /**
   * How deep the body's JSON may nest (the top-level object is level 1); deeper is a `400`
   * (`code: 'request_too_deep'`), found in one pass over the bytes before the parse.
   * @default 128
   */
  readonly maxJsonDepth?: number
  /**
   * How long the body may take to arrive, from the reader's call; past it the client gets
   * `408` and the rest is not read. `Infinity`: no bound.
   * @default 60_000
   * @example { adapter: openaiChat, requestBodyTimeoutMs: 10_000 }
   */
  readonly requestBodyTimeoutMs?: number
  /**
   * What code in front of the reader made of the body, when it read it already (Hono's
   * `await c.req.json()`): a parsed value, a string or bytes. Used only when the request's body
   * was read already (`request.bodyUsed`, or its stream locked), through the same checks of
   * size, depth and shape. Without it such a request is answered `500` naming the cause.
   */
  readonly parsedBody?: unknown
}

/**
 * What {@link readClientRequest} read: the request's JSON body, or the answer to send the
 * client instead (a `400`, `408`, `413` or `500` in its protocol; nothing went upstream) and
 * the record of it to log.
 *
 * @group Relay
 */
export type ClientRequestRead =
  | { readonly ok: true; readonly body: Record<string, unknown> }
  | {
      readonly ok: false
      readonly response: Response
      readonly refusal: ClientRequestRefusal & { kind: 'refused' }
    }

/** The answer to a refused request, in the client's protocol, with its record. */
function refusal(
  adapter: StreamAdapter,
  check: ClientBodyRefusal,
  started: number,
): ClientRequestRead & { ok: false } {
  // `connection: close` after a body left unread: its rest must not be taken for a next request.
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (check.status === 413 || check.status === 408) headers.connection = 'close'
  const response = new Response(clientErrorBody(adapter, check.error), {
    status: check.status,
    headers,
  })
  return {
    ok: false,
    response,
    refusal: refusalOf(check, now() - started) as ClientRequestRefusal & { kind: 'refused' },
  }
}

/**
 * Reads a client's web `Request` for the relay: the body as bytes within
 * `maxRequestBodyBytes` (a declared `content-length` past it is refused before a byte is
 * read) and `requestBodyTimeoutMs`, nested no deeper than `maxJsonDepth` (checked on the bytes,
 * before the parse), decoded as UTF-8 once, parsed as JSON and checked (`stream` absent or a
 * boolean, `model` a string where the protocol's body names it). An invalid request resolves
 * to a `400` (`408`, `413`) `Response` in the client's protocol, to return as it is, with the
 * record of it (`refusal`): it never reaches the upstream. A body read already by code in front
 * is taken from `parsedBody`, or answered `500` naming the cause. Never rejects for a bad body;
 * a body that fails to arrive rejects, and a bad option rejects with a `RangeError` before a
 * byte is read.
 *
 * @example
 * const read = await readClientRequest(request, { adapter: openaiChat })
 * if (!read.ok) return read.response
 * void relay({ sink, adapter: openaiChat, request: { url, body: read.body }, attempt: fetchAttempt() })
 *
 * @group Relay
 */
export async function readClientRequest(
  request: Request,
  options: ReadClientRequestOptions,
): Promise<ClientRequestRead> {
  const started = now()
  if (typeof options?.adapter?.inspect !== 'function')
    throw new TypeError('readClientRequest: adapter must be a StreamAdapter')
  checkKeepClientBytes('readClientRequest', options.keepClientBytes)
  const limits = readerLimits(options, requestBodyDefaults)
  let check: ClientBodyCheck
  let bytes: Uint8Array | undefined
  // Read (or being read) by code in front of the reader: its stream has nothing left for us.
  if (request.bodyUsed || request.body?.locked === true) {
    if (options.parsedBody === undefined)
      return refusal(options.adapter, alreadyRead('readClientRequest'), started)
    ;({ check, bytes } = checkParsedBody(options.parsedBody, options.adapter, limits))
  } else {
    const read = await readClientBytes(request, limits)
    if (!(read instanceof Uint8Array)) return refusal(options.adapter, read, started)
    bytes = read
    check = checkClientBody(read, options.adapter, limits)
  }
  if (!check.ok) return refusal(options.adapter, check, started)
  return {
    ok: true,
    body:
      options.keepClientBytes === true && bytes !== undefined
        ? keepClientBytes(check.body, bytes)
        : check.body,
  }
}
