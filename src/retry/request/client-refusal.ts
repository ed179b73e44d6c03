/**
 * What a reader answers a client's request it will not hand on: the refusals (status, reason,
 * the error in words that name a bound or a field, never the body) and the record a host logs.
 * Values, not throws: the readers decide with them and write them in the client's protocol.
 *
 * @module
 */

import type { RenderableError } from '../../protocols/types.js'

/**
 * Why a reader answered a client's request itself instead of handing it on: the body was not
 * UTF-8, not JSON, not a JSON object, failed the protocol's checks, nested past `maxJsonDepth`,
 * passed `maxRequestBodyBytes`, did not arrive within `requestBodyTimeoutMs`, or had been read
 * already by code in front of the reader with nothing handed over (`parsedBody`).
 *
 * @group Relay
 */
export type ClientRequestRefusalReason =
  | 'invalid-utf8'
  | 'invalid-json'
  | 'not-an-object'
  | 'invalid-request'
  | 'too-deep'
  | 'too-large'
  | 'timeout'
  | 'already-read'

/**
 * What a request reader answered when it did not hand a request on, for a host to log beside
 * the relay's outcomes (same `kind` / `ok` words): `readClientRequest`'s `{ ok: false }` result
 * carries it as `refusal`, and `readNodeRequest` hands it to `onRefused`. `kind: 'refused'` is
 * an answer the reader wrote (`status`, with `error` the words the client was sent: they name a
 * bound or a field, never the body); `kind: 'client-gone'` (Node reader only) is a client that
 * left before its body ended, to which nothing could be written.
 *
 * @example
 * const read = await readClientRequest(request, { adapter: openaiChat })
 * if (!read.ok) {
 *   log.info('request refused', read.refusal.reason, read.refusal.status)
 *   return read.response
 * }
 *
 * @group Relay
 */
export type ClientRequestRefusal =
  | {
      readonly kind: 'refused'
      readonly ok: false
      readonly reason: ClientRequestRefusalReason
      /** The status the client was answered with. */
      readonly status: 400 | 408 | 413 | 500
      /** The error the client was sent, in its protocol. */
      readonly error: RenderableError
      /** From the reader's call to its answer, in milliseconds. */
      readonly durationMs: number
    }
  | {
      readonly kind: 'client-gone'
      readonly ok: false
      readonly reason: 'client-gone'
      readonly status: null
      readonly durationMs: number
    }

/**
 * What a client's request body turned out to be: a request the relay can send, or the
 * status and error to answer it with (in the client's protocol, by `clientErrorBody` from `stream-boundary/advanced`).
 *
 * @group Relay
 */
export type ClientBodyCheck =
  | { readonly ok: true; readonly body: Record<string, unknown> }
  | {
      readonly ok: false
      readonly status: 400 | 408 | 413 | 500
      readonly reason: ClientRequestRefusalReason
      readonly error: RenderableError
    }

/** A refused body's check. */
export type ClientBodyRefusal = ClientBodyCheck & { ok: false }

/** A `400` for `reason`, with `message` and `code`. */
export function invalid(
  reason: ClientRequestRefusalReason,
  message: string,
  code = 'invalid_request',
): ClientBodyRefusal {
  return {
    ok: false,
    status: 400,
    reason,
    error: { type: 'invalid_request_error', code, message, status: 400 },
  }
}

/** The `413` of a body past `limit` bytes; the message names the bound, never the body. */
export function tooLarge(limit: number): ClientBodyRefusal {
  return {
    ok: false,
    status: 413,
    reason: 'too-large',
    error: {
      type: 'request_too_large',
      code: 'request_too_large',
      message: `The request body is larger than this gateway accepts (${limit} bytes)`,
      status: 413,
    },
  }
}

/** The `400` of a body nested past `max` levels; names the bound, never the body. */
export function tooDeep(max: number): ClientBodyRefusal {
  return invalid(
    'too-deep',
    `The request body is nested deeper than this gateway accepts (${max} levels)`,
    'request_too_deep',
  )
}

/** The `408` of a body that did not arrive within `timeoutMs`. */
export function tooSlow(timeoutMs: number): ClientBodyRefusal {
  return {
    ok: false,
    status: 408,
    reason: 'timeout',
    error: {
      type: 'timeout',
      code: 'request_timeout',
      message: `The request body did not arrive within ${timeoutMs} ms`,
      status: 408,
    },
  }
}

/**
 * The `500` of a body that code in front of the reader read (a body parser) and did not hand
 * over: the gateway's fault, named so its owner finds it in the client's error or the log.
 */
export function alreadyRead(where: string): ClientBodyRefusal {
  return {
    ok: false,
    status: 500,
    reason: 'already-read',
    error: {
      type: 'internal_error',
      code: 'request_body_already_read',
      message: `The request body was already read before ${where} (a body parser in front of it, such as express.json() or Fastify's JSON parser): pass what it parsed as \`parsedBody\`, or turn it off for this route`,
      status: 500,
    },
  }
}

/** The record of a refusal the reader answered, `durationMs` after it started. */
export function refusalOf(check: ClientBodyRefusal, durationMs: number): ClientRequestRefusal {
  return {
    kind: 'refused',
    ok: false,
    reason: check.reason,
    status: check.status,
    error: check.error,
    durationMs,
  }
}
