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
import { type ClientBodyCheck, invalid, tooDeep, tooLarge } from './client-refusal.js'
import { measureValue, nestsDeeperThan } from './json-depth.js'

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

// `fatal`: a byte sequence that is not UTF-8 is refused, not turned into U+FFFD and sent on.
const utf8 = new TextDecoder('utf-8', { fatal: true })

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
  else if (parsed instanceof ArrayBuffer) bytes = new Uint8Array(parsed)
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

/** Where a body read with `keepClientBytes` keeps the client's bytes (`Symbol.for`: copies agree). */
const clientBytes = Symbol.for('stream-boundary.clientBytes')

const unchangeable = (): never => {
  throw new TypeError(
    'a body read with keepClientBytes cannot change in place (its bytes go upstream as they came): build a new one, e.g. { ...body, model }',
  )
}

/**
 * What guards a kept body and each object in it: any change throws, in sloppy-mode code too,
 * where a frozen object alone ignores an assignment in silence.
 */
const guard: ProxyHandler<object> = {
  set: unchangeable,
  defineProperty: unchangeable,
  deleteProperty: unchangeable,
  setPrototypeOf: unchangeable,
}

/**
 * Freezes a parsed JSON value and everything in it behind guards, with no recursion (any
 * depth JSON took): children first, so each object holds its children's guards and a read
 * through a guard hands out a guard.
 */
function guardDeep(root: object): object {
  const order: object[] = []
  const pending: object[] = [root]
  for (let value = pending.pop(); value !== undefined; value = pending.pop()) {
    order.push(value)
    for (const member of Object.values(value))
      if (typeof member === 'object' && member !== null) pending.push(member)
  }
  const guarded = new Map<object, object>()
  for (let i = order.length - 1; i >= 0; i--) {
    const value = order[i] as Record<string, unknown>
    for (const key of Object.keys(value)) {
      const member = value[key]
      if (typeof member === 'object' && member !== null) value[key] = guarded.get(member)
    }
    guarded.set(value, new Proxy(Object.freeze(value), guard))
  }
  return guarded.get(root) as object
}

/** Checks a reader's `keepClientBytes` option: absent or a boolean. */
export function checkKeepClientBytes(where: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'boolean')
    throw new TypeError(`${where}: keepClientBytes must be a boolean, got ${kindOf(value)}`)
}

/**
 * Freezes a client's parsed body deeply and keeps the bytes it was parsed from on it (a
 * non-enumerable symbol: a spread copy and `JSON.stringify` leave them behind), so an attempt
 * that sends this very body sends the client's bytes as they came. The body and every object
 * in it are frozen behind a `Proxy` whose every change throws a `TypeError`, in sloppy-mode
 * code too (a frozen object alone ignores an assignment there), so its bytes always say what
 * it says. A UTF-8 byte order mark is left out, as the parse left it out.
 */
export function keepClientBytes(
  body: Record<string, unknown>,
  bytes: Uint8Array,
): Record<string, unknown> {
  const bom = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf
  Object.defineProperty(body, clientBytes, { value: bom ? bytes.subarray(3) : bytes })
  return guardDeep(body) as Record<string, unknown>
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
