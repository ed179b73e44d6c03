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
import type { StreamAdapter } from '../protocols/types.js'
import {
  checkClientBody,
  checkKeepClientBytes,
  clientErrorBody,
  keepClientBytes,
  tooLarge,
} from '../retry/request/client-request.js'

/**
 * Options of {@link readNodeRequest}.
 *
 * @group Relay
 */
export interface ReadNodeRequestOptions {
  /** The client's protocol: its checks, and the shape of a `400`/`413` answer. */
  readonly adapter: StreamAdapter
  /**
   * The most bytes a request body may have; past it the client gets `413` and the rest is not
   * read.
   * @default 33_554_432 (32 MiB)
   */
  readonly maxRequestBodyBytes?: number
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
}

/** The request's bytes, or `undefined` once past `limit` (nothing more is read). */
function bytesWithin(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  if (Number(req.headers['content-length']) > limit) return Promise.resolve(undefined)
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const stop = () => {
      req.off('data', onData)
      req.off('end', onEnd)
      req.off('error', onError)
      req.off('close', onClose)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size <= limit) return void chunks.push(chunk)
      stop()
      req.pause()
      resolve(undefined)
    }
    const onEnd = () => {
      stop()
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks))
    }
    const onError = (error: Error) => {
      stop()
      reject(error)
    }
    const onClose = () => {
      stop()
      reject(new Error('the client closed the connection before its request body ended'))
    }
    req.on('data', onData)
    req.once('end', onEnd)
    req.once('error', onError)
    req.once('close', onClose)
  })
}

/**
 * Reads a client's request on a Node server for the relay: the body as bytes within
 * `maxRequestBodyBytes` (a declared `content-length` past it is refused before a byte is
 * read), decoded as UTF-8 once (a character split across chunks arrives whole), parsed as
 * JSON and checked (`stream` absent or a boolean, `model` a string where the protocol's body
 * names it). An invalid request is answered here, `400` (or `413`) in the client's protocol,
 * and never reaches the upstream: the promise then resolves to `undefined`, as it does when
 * the client left before its body ended. Never rejects.
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
  if (typeof options?.adapter?.inspect !== 'function')
    throw new TypeError('readNodeRequest: adapter must be a StreamAdapter')
  checkKeepClientBytes('readNodeRequest', options.keepClientBytes)
  const limit = options.maxRequestBodyBytes ?? requestBodyDefaults.maxRequestBodyBytes
  let bytes: Buffer | undefined
  try {
    bytes = await bytesWithin(req, limit)
  } catch {
    res.destroy()
    return undefined
  }
  const check = bytes === undefined ? tooLarge(limit) : checkClientBody(bytes, options.adapter)
  if (check.ok)
    return options.keepClientBytes === true && bytes !== undefined
      ? keepClientBytes(check.body, bytes)
      : check.body
  if (res.headersSent || res.destroyed) return undefined
  const head: Record<string, string> = { 'content-type': 'application/json' }
  // The unread rest of a body past the bound must not be taken for a next request.
  if (check.status === 413) head.connection = 'close'
  res.writeHead(check.status, head).end(clientErrorBody(options.adapter, check.error))
  return undefined
}
