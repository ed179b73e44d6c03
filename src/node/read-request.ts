/**
 * Reading a client's request on a Node server for the relay (`readNodeRequest`, exported by
 * `stream-boundary/node`): the bytes within a bound, then the checks every protocol shares
 * (`retry/request/client-request.ts`), answering a bad request itself.
 *
 * @module
 */

import { Buffer } from 'node:buffer'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { requestBodyDefaults } from '../advanced.js'
import { callSafely, now } from '../call-safely.js'
import type { StreamAdapter } from '../protocols/types.js'
import {
  alreadyRead,
  type ClientBodyCheck,
  type ClientRequestRefusal,
  refusalOf,
  tooLarge,
  tooSlow,
} from '../retry/request/client-refusal.js'
import {
  checkClientBody,
  checkKeepClientBytes,
  checkParsedBody,
  clientErrorBody,
  keepClientBytes,
  type ReaderLimits,
  readerLimits,
} from '../retry/request/client-request.js'

/**
 * Options of {@link readNodeRequest}.
 *
 * @group Relay
 */
export interface ReadNodeRequestOptions {
  /** The client's protocol: its checks, and the shape of a `400`/`408`/`413` answer. */
  readonly adapter: StreamAdapter
  /**
   * The most bytes a request body may have; past it the client gets `413` and the rest is not
   * read.
   * @default 33_554_432 (32 MiB)
   */
  readonly maxRequestBodyBytes?: number
  /**
   * How deep the body's JSON may nest (the top-level object is level 1); deeper is a `400`
   * (`code: 'request_too_deep'`), found in one pass over the bytes before the parse.
   * @default 128
   */
  readonly maxJsonDepth?: number
  /**
   * How long the body may take to arrive, from the reader's call; past it the client gets
   * `408` (with `connection: close`) and the rest is not read. `Infinity`: no bound (Node's
   * own `server.requestTimeout`, 300 s by default, still holds).
   * @default 60_000
   * @example { adapter: openaiChat, requestBodyTimeoutMs: 10_000 }
   */
  readonly requestBodyTimeoutMs?: number
  /**
   * Keep the client's bytes with the body read, and freeze the body (deeply): a ready attempt
   * (`nodeHttpAttempt`, `fetchAttempt`) that sends this very body — no `adjustRequest`, no
   * fallback's own body, no translation, no continuation — then sends the client's bytes as
   * they came (key order and spacing kept) instead of serialising the body again. To change
   * the request, build a new body (`{ ...body, model }`): changing a frozen one throws.
   * @default false
   * @example { adapter: openaiChat, keepClientBytes: true }
   */
  readonly keepClientBytes?: boolean
  /**
   * What a body parser in front of the reader made of the body (Fastify's `request.body`; with
   * Express, `req.body` is found without it): a parsed value, a string or a `Buffer`. Used only
   * when the request's stream was read already, through the same checks of size, depth and
   * shape (a parsed value is serialised once for them). Without it, such a request is answered
   * `500` naming the cause, at once.
   * @example { adapter: openaiChat, parsedBody: request.body }
   */
  readonly parsedBody?: unknown
  /**
   * Called once when the reader answered the request itself (`kind: 'refused'`: a `400`,
   * `408`, `413` or `500`, after it was written) or the client left before its body ended
   * (`kind: 'client-gone'`): the record to log, since the promise then only says `undefined`.
   * A hook that throws is ignored.
   * @example { adapter: openaiChat, onRefused: (r) => log.info('refused', r.reason, r.status) }
   */
  readonly onRefused?: ((refusal: ClientRequestRefusal) => void) | undefined
}

/** What stopped a read short: past the size bound, past the time bound, the client gone. */
type ReadStop = 'too-large' | 'timeout' | 'gone'

/**
 * The request's bytes, or what stopped the read (nothing more is read then). The one timer is
 * cleared, and every listener removed, on every path.
 */
function bytesWithin(req: IncomingMessage, limits: ReaderLimits): Promise<Buffer | ReadStop> {
  const limit = limits.maxRequestBodyBytes
  if (Number(req.headers['content-length']) > limit) return Promise.resolve('too-large')
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let size = 0
    let timer: ReturnType<typeof setTimeout> | undefined
    const finish = (result: Buffer | ReadStop) => {
      clearTimeout(timer)
      req.off('data', onData)
      req.off('end', onEnd)
      req.off('error', onGone)
      req.off('close', onGone)
      // The unread rest stays in the kernel; `connection: close` on the answer ends it.
      if (typeof result === 'string') req.pause()
      resolve(result)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size <= limit) return void chunks.push(chunk)
      finish('too-large')
    }
    const onEnd = () => finish(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks))
    const onGone = () => finish('gone')
    if (limits.requestBodyTimeoutMs !== Number.POSITIVE_INFINITY)
      timer = setTimeout(finish, limits.requestBodyTimeoutMs, 'timeout')
    req.on('data', onData)
    req.once('end', onEnd)
    req.once('error', onGone)
    req.once('close', onGone)
  })
}

/**
 * What the request's body is: read from its stream, or, when code in front read the stream
 * already, what it handed over (`parsedBody`, else Express's `req.body`). Never waits on a
 * stream that has nothing left to give.
 */
async function bodyOf(
  req: IncomingMessage,
  options: ReadNodeRequestOptions,
  limits: ReaderLimits,
): Promise<{ readonly check: ClientBodyCheck; readonly bytes: Uint8Array | undefined } | 'gone'> {
  if (req.readableEnded || req.readableDidRead) {
    const parsed = options.parsedBody ?? (req as { body?: unknown }).body
    if (parsed !== undefined) return checkParsedBody(parsed, options.adapter, limits)
    return { check: alreadyRead('readNodeRequest'), bytes: undefined }
  }
  // Closed before a byte was read: the client left before the handler ran.
  if (req.destroyed) return 'gone'
  const bytes = await bytesWithin(req, limits)
  if (bytes === 'gone') return bytes
  if (bytes === 'too-large')
    return { check: tooLarge(limits.maxRequestBodyBytes), bytes: undefined }
  if (bytes === 'timeout') return { check: tooSlow(limits.requestBodyTimeoutMs), bytes: undefined }
  return { check: checkClientBody(bytes, options.adapter, limits), bytes }
}

/** A client that left before it could be answered: nothing to write, a record to log. */
function clientGone(
  res: ServerResponse,
  options: ReadNodeRequestOptions,
  started: number,
): undefined {
  res.destroy()
  callSafely(options.onRefused, {
    kind: 'client-gone',
    ok: false,
    reason: 'client-gone',
    status: null,
    durationMs: now() - started,
  })
  return undefined
}

/**
 * Reads a client's request on a Node server for the relay: the body as bytes within
 * `maxRequestBodyBytes` (a declared `content-length` past it is refused before a byte is
 * read) and `requestBodyTimeoutMs`, nested no deeper than `maxJsonDepth` (checked on the
 * bytes, before the parse), decoded as UTF-8 once (a character split across chunks arrives
 * whole), parsed as JSON and checked (`stream` absent or a boolean, `model` a string where the
 * protocol's body names it). An invalid request is answered here, `400` (`408`, `413`) in the
 * client's protocol, and never reaches the upstream: the promise then resolves to `undefined`,
 * as it does when the client left before its body ended, and `onRefused` gets the record. A
 * body a parser in front already read is taken from `parsedBody` or Express's `req.body`, else
 * answered `500` naming the cause. Never rejects for a request; a bad option rejects with a
 * `RangeError`/`TypeError` before anything is read.
 *
 * @example
 * const body = await readNodeRequest(req, res, { adapter: openaiChat })
 * if (body === undefined) return // answered already
 *
 * @group Relay
 */
export async function readNodeRequest(
  req: IncomingMessage,
  res: ServerResponse,
  options: ReadNodeRequestOptions,
): Promise<Record<string, unknown> | undefined> {
  const started = now()
  if (typeof options?.adapter?.inspect !== 'function')
    throw new TypeError('readNodeRequest: adapter must be a StreamAdapter')
  checkKeepClientBytes('readNodeRequest', options.keepClientBytes)
  const limits = readerLimits(options, requestBodyDefaults)
  const read = await bodyOf(req, options, limits)
  if (read === 'gone') return clientGone(res, options, started)
  const { check, bytes } = read
  if (check.ok)
    return options.keepClientBytes === true && bytes !== undefined
      ? keepClientBytes(check.body, bytes)
      : check.body
  if (res.destroyed) return clientGone(res, options, started)
  if (!res.headersSent) {
    const head: Record<string, string> = { 'content-type': 'application/json' }
    // The unread rest of a body past a bound must not be taken for a next request.
    if (check.status === 413 || check.status === 408) head.connection = 'close'
    res.writeHead(check.status, head).end(clientErrorBody(options.adapter, check.error))
  }
  callSafely(options.onRefused, refusalOf(check, now() - started))
  return undefined
}
