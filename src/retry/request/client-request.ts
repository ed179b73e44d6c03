/**
 * What a gateway must check of a client's request before the relay sends it anywhere: the
 * bytes are UTF-8 (decoded once, never chunk by chunk), they nest no deeper than a bound, they
 * parse as a JSON object, `stream` is absent or a boolean, and the protocol's own fields hold
 * (`model` a string where the body names it). A request that fails gets a `400` in the
 * client's protocol and never reaches the upstream. Pure: `readClientRequest` (web `Request`)
 * and `readNodeRequest` (`stream-boundary/node`) read the bytes, this decides.
 *
 * @module
 */

import { positiveInteger, timeoutMilliseconds } from '../../options.js'
import type { RenderableError, StreamAdapter } from '../../protocols/types.js'
import { measureValue, nestsDeeperThan } from './json-depth.js'

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
 * The reader options every reader shares, checked once per call before a byte is read.
 * @internal
 */
export interface ReaderLimits {
  readonly maxRequestBodyBytes: number
  readonly maxJsonDepth: number
  /** `Infinity`: no time bound. */
  readonly requestBodyTimeoutMs: number
}

/**
 * Checks a reader's bounds (a `RangeError` naming the option: a size or depth that is not a
 * positive integer, a timeout that is not a positive number of milliseconds below 2^31, or
 * `Infinity` for none) and fills in the defaults.
 */
export function readerLimits(options: Partial<ReaderLimits>, defaults: ReaderLimits): ReaderLimits {
  return {
    maxRequestBodyBytes: positiveInteger(
      'maxRequestBodyBytes',
      options.maxRequestBodyBytes ?? defaults.maxRequestBodyBytes,
    ),
    maxJsonDepth: positiveInteger('maxJsonDepth', options.maxJsonDepth ?? defaults.maxJsonDepth),
    requestBodyTimeoutMs: timeoutMilliseconds(
      'requestBodyTimeoutMs',
      options.requestBodyTimeoutMs ?? defaults.requestBodyTimeoutMs,
    ),
  }
}

/**
 * What a client's request body turned out to be: a request the relay can send, or the
 * status and error to answer it with (in the client's protocol, by {@link clientErrorBody}).
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

// `fatal`: a byte sequence that is not UTF-8 is refused, not turned into U+FFFD and sent on.
const utf8 = new TextDecoder('utf-8', { fatal: true })

function invalid(
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
function tooDeep(max: number): ClientBodyRefusal {
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

/** What kind of JSON value `value` is, for a message. */
function kindOf(value: unknown): string {
  if (value === null) return 'null'
  return Array.isArray(value) ? 'an array' : typeof value
}

/**
 * Decides whether a client's request body is a request `adapter`'s protocol can relay: nested
 * no deeper than `bounds.maxJsonDepth` (128 by default; one pass over the bytes, before the
 * parse, so no deep body ever reaches code that recurses), UTF-8, a JSON object, `stream`
 * absent or a boolean, and the adapter's own `invalidRequest` check. Never throws: an adapter
 * check that throws is answered `400` naming the adapter.
 *
 * @group Relay
 */
export function checkClientBody(
  bytes: Uint8Array,
  adapter: StreamAdapter,
  bounds: { readonly maxJsonDepth?: number } = {},
): ClientBodyCheck {
  const maxDepth = bounds.maxJsonDepth ?? defaultMaxJsonDepth
  // Before the parse: a body nested a million deep is refused before it becomes objects.
  if (nestsDeeperThan(bytes, maxDepth)) return tooDeep(maxDepth)
  let text: string
  try {
    text = utf8.decode(bytes)
  } catch {
    return invalid('invalid-utf8', 'The request body is not valid UTF-8')
  }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    return invalid('invalid-json', 'The request body is not valid JSON')
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    return invalid('not-an-object', `The request body must be a JSON object, got ${kindOf(json)}`)
  const body = json as Record<string, unknown>
  if (body.stream !== undefined && typeof body.stream !== 'boolean')
    return invalid('invalid-request', `\`stream\` must be a boolean, got ${kindOf(body.stream)}`)
  let problem: unknown
  try {
    problem = adapter.invalidRequest?.(body)
  } catch {
    problem = `the ${adapter.name} adapter could not check the request`
  }
  if (typeof problem === 'string')
    return invalid('invalid-request', `The request is invalid: ${problem}`)
  return { ok: true, body }
}

/**
 * 128 levels: the default recursion limit of serde_json, which many gateways and upstreams
 * parse with, so a deeper body would be refused further on anyway; what real requests need
 * (a tool's JSON Schema nested 30 deep is about 65 levels of request) fits twice over, and
 * serialising 128 levels is far from any stack's limit. docs/errors.md says why.
 */
export const defaultMaxJsonDepth = 128

const encoder = new TextEncoder()

/**
 * A body that code in front of the reader already parsed or read (`req.body` of
 * `express.json()`, Fastify's `request.body`, Hono's `c.req.json()`), through the checks a
 * read body gets: a string or bytes as the bytes they are; a parsed value measured without
 * recursion (depth, and no more values than the byte bound allows), then serialised once and
 * checked as those bytes (the bytes a `keepClientBytes` body keeps). `undefined` only when
 * there is nothing to check.
 */
export function checkParsedBody(
  parsed: unknown,
  adapter: StreamAdapter,
  limits: ReaderLimits,
): { readonly check: ClientBodyCheck; readonly bytes: Uint8Array | undefined } {
  let bytes: Uint8Array
  if (parsed instanceof Uint8Array) bytes = parsed
  else if (typeof parsed === 'string') bytes = encoder.encode(parsed)
  else {
    const measure = measureValue(parsed, limits.maxJsonDepth, limits.maxRequestBodyBytes)
    if (measure === 'too-deep') return { check: tooDeep(limits.maxJsonDepth), bytes: undefined }
    if (measure === 'too-large')
      return { check: tooLarge(limits.maxRequestBodyBytes), bytes: undefined }
    let text: string | undefined
    try {
      text = JSON.stringify(parsed)
    } catch {
      // A value JSON cannot write (a BigInt, a throwing toJSON): not a JSON body.
    }
    if (text === undefined)
      return {
        check: invalid('invalid-json', 'The request body is not valid JSON'),
        bytes: undefined,
      }
    bytes = encoder.encode(text)
  }
  if (bytes.byteLength > limits.maxRequestBodyBytes)
    return { check: tooLarge(limits.maxRequestBodyBytes), bytes: undefined }
  return { check: checkClientBody(bytes, adapter, limits), bytes }
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

/** Where a body read with `keepClientBytes` keeps the client's bytes (`Symbol.for`: copies agree). */
const clientBytes = Symbol.for('stream-boundary.clientBytes')

/** Freezes a parsed JSON value and everything in it, with no recursion (any depth JSON took). */
function freezeDeep(root: object): void {
  const pending: object[] = [root]
  for (let value = pending.pop(); value !== undefined; value = pending.pop()) {
    Object.freeze(value)
    const members = Array.isArray(value) ? value : Object.values(value)
    for (const member of members)
      if (typeof member === 'object' && member !== null) pending.push(member)
  }
}

/** Checks a reader's `keepClientBytes` option: absent or a boolean. */
export function checkKeepClientBytes(where: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'boolean')
    throw new TypeError(`${where}: keepClientBytes must be a boolean, got ${kindOf(value)}`)
}

/**
 * Freezes a client's parsed body deeply and keeps the bytes it was parsed from on it (a
 * non-enumerable symbol: a spread copy, `structuredClone` and `JSON.stringify` leave them
 * behind), so an attempt that sends this very body sends the client's bytes as they came. A
 * frozen body cannot change in place, so its bytes always say what it says. A UTF-8 byte order
 * mark is left out, as the parse left it out.
 */
export function keepClientBytes(
  body: Record<string, unknown>,
  bytes: Uint8Array,
): Record<string, unknown> {
  const bom = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf
  Object.defineProperty(body, clientBytes, { value: bom ? bytes.subarray(3) : bytes })
  freezeDeep(body)
  return body
}

/**
 * The client's bytes of a body read with `keepClientBytes`, when `body` is that very body
 * (frozen since, so unchanged); `undefined` for any other body (an adjusted, translated or
 * continued request, a fallback's own, a copy): that one is serialised.
 */
export function clientBytesOf(body: unknown): Uint8Array<ArrayBuffer> | undefined {
  if (typeof body !== 'object' || body === null || !Object.isFrozen(body)) return undefined
  const bytes = (body as { [clientBytes]?: unknown })[clientBytes]
  // A reader's bytes: a request body is never in a SharedArrayBuffer.
  return bytes instanceof Uint8Array ? (bytes as Uint8Array<ArrayBuffer>) : undefined
}

/**
 * The JSON body of an error answer in the client's protocol (`adapter.renderErrorBody`), or
 * the generic `{"error":{…}}` when the adapter has none or its renderer fails.
 *
 * @group Relay
 */
export function clientErrorBody(adapter: StreamAdapter, error: RenderableError): string {
  try {
    const rendered = adapter.renderErrorBody?.(error)
    if (typeof rendered === 'string') return rendered
  } catch {
    // The host's renderer failed: the generic body still tells the client the truth.
  }
  return JSON.stringify({ error })
}
