/**
 * Reading a request body that must be held (to send it again on a retry) without letting one
 * client make the process hold an unbounded amount: a declared `content-length` past the bound
 * is refused before a byte is read, and a streamed body is read no further than the bound.
 *
 * @module
 */

import { isRequestBodyTooLargeError, RequestBodyTooLargeError } from '../../errors.js'
import { positiveInteger } from '../../options.js'
import { joinBytes } from '../../protocols/bytes.js'
import type { StreamAdapter } from '../../protocols/types.js'
import {
  type ClientBodyCheck,
  checkClientBody,
  checkKeepClientBytes,
  clientErrorBody,
  keepClientBytes,
  tooLarge,
} from './client-request.js'

/**
 * Defaults of {@link ReadRequestBodyOptions}.
 *
 * @group Relay
 */
export const requestBodyDefaults: { readonly maxRequestBodyBytes: number } = Object.freeze({
  // 32 MiB: Anthropic's Messages limit (32 MB). OpenAI takes up to 50 MB of images per
  // request and Gemini 20 MB of inline data; a bigger default would only let one client
  // make a gateway hold more than most upstreams accept.
  maxRequestBodyBytes: 32 * 1024 * 1024,
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
}

/**
 * What {@link readClientRequest} read: the request's JSON body, or the answer to send the
 * client instead (a `400` or `413` in its protocol; nothing went upstream).
 *
 * @group Relay
 */
export type ClientRequestRead =
  | { readonly ok: true; readonly body: Record<string, unknown> }
  | { readonly ok: false; readonly response: Response }

/** The answer to a refused request, in the client's protocol. */
function refusal(adapter: StreamAdapter, check: ClientBodyCheck & { ok: false }): Response {
  // `connection: close` after a body left unread: its rest must not be taken for a next request.
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (check.status === 413) headers.connection = 'close'
  return new Response(clientErrorBody(adapter, check.error), { status: check.status, headers })
}

/**
 * Reads a client's web `Request` for the relay: the body as bytes within
 * `maxRequestBodyBytes` (a declared `content-length` past it is refused before a byte is
 * read), decoded as UTF-8 once, parsed as JSON and checked (`stream` absent or a boolean,
 * `model` a string where the protocol's body names it). An invalid request resolves to a
 * `400` (or `413`) `Response` in the client's protocol, to return as it is: it never reaches
 * the upstream. Never rejects for a bad body; a body that fails to arrive rejects.
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
  if (typeof options?.adapter?.inspect !== 'function')
    throw new TypeError('readClientRequest: adapter must be a StreamAdapter')
  checkKeepClientBytes('readClientRequest', options.keepClientBytes)
  const limit = options.maxRequestBodyBytes ?? requestBodyDefaults.maxRequestBodyBytes
  let bytes: Uint8Array | undefined
  try {
    bytes = await readRequestBody(request.body, {
      maxRequestBodyBytes: limit,
      contentLength: request.headers.get('content-length'),
    })
  } catch (error) {
    if (!isRequestBodyTooLargeError(error)) throw error
    // Not cancelled: on a Node server that resets the connection before the 413 is sent.
    return { ok: false, response: refusal(options.adapter, tooLarge(limit)) }
  }
  const received = bytes ?? new Uint8Array(0)
  const check = checkClientBody(received, options.adapter)
  if (!check.ok) return { ok: false, response: refusal(options.adapter, check) }
  return {
    ok: true,
    body: options.keepClientBytes === true ? keepClientBytes(check.body, received) : check.body,
  }
}
