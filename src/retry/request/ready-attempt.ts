/**
 * The ready attempt: an attempt function the library provides, so a gateway does not have to
 * get the seam right by hand. It sends exactly this attempt's request (`context.request`:
 * fallback routes, `adjustRequest`, the context-window fit and continuation prefills go out as
 * the relay made them), the adapter's credential header for the leased key, the protocol's
 * required headers, the allowlisted client headers, the attempt's signal, and never follows a
 * redirect. `nodeHttpAttempt` in `stream-boundary/node` is its `node:http` twin; both build
 * the request with {@link attemptRequest}.
 *
 * Pure and stateless: the subpath entries carry their own copy (tsup.config.ts, `copyable`).
 *
 * @module
 */

import type { StreamAdapter } from '../../protocols/types.js'
import { clientBytesOf } from './client-request.js'
import { isFirstPartyApi } from './correlation.js'

/**
 * The client's request headers: a web `Headers`, or a Node `IncomingMessage.headers` record.
 *
 * @group Relay
 */
export type ClientHeaders =
  | Headers
  | Readonly<Record<string, string | readonly string[] | undefined>>

/**
 * Options of {@link "stream-boundary"!fetchAttempt | fetchAttempt} (and of `nodeHttpAttempt`
 * in `stream-boundary/node`).
 *
 * @group Relay
 */
export interface ReadyAttemptOptions {
  /**
   * The client's request headers. Only the names in `forwardHeaders` go upstream (and none
   * the client named in its `Connection` header); the client's own credential never does.
   */
  readonly clientHeaders?: ClientHeaders | undefined
  /**
   * Which client headers go upstream, lowercase.
   * @default readyAttemptDefaults.forwardHeaders: `anthropic-version`, `anthropic-beta`,
   * `openai-beta`, `x-client-request-id`
   * @example { forwardHeaders: [...readyAttemptDefaults.forwardHeaders, 'x-stainless-lang'] }
   */
  readonly forwardHeaders?: readonly string[] | undefined
  /**
   * Headers sent on every attempt (a proxy's own header), under the credential and the
   * forwarded client headers.
   * @default {}
   */
  readonly headers?: Readonly<Record<string, string>> | undefined
  /**
   * The credential to send when the relay has no pool (the caller's own key), in the
   * adapter's credential header. With a pool the leased key is sent instead. Without either,
   * no credential header is sent (an upstream that needs none).
   * @default undefined
   */
  readonly credential?: string | undefined
  /**
   * The upstream URL when the relay was given no `request.url`.
   * @default undefined (the request's own URL)
   */
  readonly url?: string | undefined
}

/**
 * Defaults of {@link ReadyAttemptOptions}.
 *
 * @group Relay
 */
export const readyAttemptDefaults: { readonly forwardHeaders: readonly string[] } = Object.freeze({
  // What the official SDKs send that changes the upstream's answer or finds it in its logs;
  // never a credential, a cookie or a hop-by-hop header.
  forwardHeaders: Object.freeze([
    'anthropic-version',
    'anthropic-beta',
    'openai-beta',
    'x-client-request-id',
  ]),
})

/**
 * What one attempt sends: its URL, headers (lowercase names) and JSON body (the client's own
 * bytes for a body read with `keepClientBytes` and sent unchanged).
 */
export interface AttemptRequest {
  readonly url: string
  readonly headers: Record<string, string>
  readonly body: string | Uint8Array<ArrayBuffer>
}

/**
 * What a ready attempt reads of an attempt's context (every `AttemptContext` has it).
 *
 * @group Relay
 */
export interface AttemptRequestContext {
  readonly key: { readonly secret: string } | undefined
  readonly adapter: StreamAdapter
  readonly request: { readonly url: string | undefined; readonly body: unknown } | undefined
  readonly requestId: string | undefined
}

/** One client header's value, or `undefined`. */
function clientHeader(headers: ClientHeaders | undefined, name: string): string | undefined {
  if (headers === undefined) return undefined
  if (headers instanceof Headers) return headers.get(name) ?? undefined
  const value = headers[name]
  return typeof value === 'string' ? value : value?.join(', ')
}

/** Whether a `Connection` header value names `header` (then it is hop-by-hop: it ends here). */
function namedIn(connection: string | undefined, header: string): boolean {
  if (connection === undefined || !connection.includes(header)) return false
  return connection.split(',').some((token) => token.trim() === header)
}

/**
 * Checks the options of a ready attempt once, when it is made: a wrong one is a `TypeError`
 * naming it, not a failed attempt on every request.
 */
export function checkReadyAttemptOptions(where: string, options: ReadyAttemptOptions): void {
  if (typeof options !== 'object' || options === null)
    throw new TypeError(`${where} takes an options object, got ${String(options)}`)
  const { forwardHeaders, credential, url, headers } = options
  if (
    forwardHeaders !== undefined &&
    (!Array.isArray(forwardHeaders) || forwardHeaders.some((name) => typeof name !== 'string'))
  )
    throw new TypeError(`${where}: forwardHeaders must be a list of header names`)
  if (credential !== undefined && (typeof credential !== 'string' || credential === ''))
    throw new TypeError(`${where}: credential must be a non-empty string`)
  if (url !== undefined && typeof url !== 'string')
    throw new TypeError(`${where}: url must be a string`)
  if (headers !== undefined && (typeof headers !== 'object' || headers === null))
    throw new TypeError(`${where}: headers must be a record of strings`)
}

/** A step of making a request that failed before anything was sent (see `RequestNotSentError`). */
type NotSentStep = 'request' | 'url' | 'headers' | 'body'

/** Makes the error a ready attempt throws when `step` failed; the message never quotes the request. */
export type NotSentError = (step: NotSentStep, message: string, cause?: unknown) => Error

const plainNotSent: NotSentError = (_step, message, cause) => new TypeError(message, { cause })

/** An HTTP header name (a token). */
const headerName = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** A header value HTTP can carry: no control character but tab, nothing past U+00FF. */
const headerValue = /^[\t\x20-\x7e\x80-\xff]*$/

/** The first header `fetch` or `node:http` would refuse, by name only (a value may be a secret). */
function unsendableHeader(headers: Record<string, string>): string | undefined {
  for (const name in headers) {
    const value = headers[name]
    if (!headerName.test(name) || typeof value !== 'string' || !headerValue.test(value)) return name
  }
  return undefined
}

/** Whether `url` parses (`URL.canParse` where the runtime has it). */
function parses(url: string): boolean {
  const canParse = (URL as { canParse?: (url: string) => boolean }).canParse
  if (canParse !== undefined) return canParse(url)
  try {
    new URL(url)
    return true
  } catch {
    return false
  }
}

/** The request body as sent: the client's own bytes, else its JSON, else `undefined`. */
function serialised(body: unknown): string | Uint8Array<ArrayBuffer> | undefined {
  try {
    return clientBytesOf(body) ?? (JSON.stringify(body) as string | undefined)
  } catch {
    // Nested too deep, cyclic, a BigInt, a `toJSON` that throws: the request's own failure.
    return undefined
  }
}

/**
 * The request one attempt sends: `context.request` as JSON to its URL, the protocol's
 * required headers, the allowlisted client headers, the credential for the leased key (or
 * `options.credential`), and `x-client-request-id` for a provider's own API. Every failure
 * here happens before anything is sent, and is thrown as `notSent(step, …)`: there is no
 * request or no URL, the URL does not parse, a header cannot be carried, the body cannot be
 * serialised as JSON.
 */
export function attemptRequest(
  context: AttemptRequestContext,
  options: ReadyAttemptOptions,
  notSent: NotSentError = plainNotSent,
): AttemptRequest {
  const { request, adapter } = context
  if (request === undefined)
    throw notSent('request', 'a ready attempt needs relay({ request: { url, body } })')
  const url = request.url ?? options.url
  if (url === undefined) throw notSent('url', 'a ready attempt needs a URL: request.url or url')
  if (!parses(url)) throw notSent('url', 'the upstream URL does not parse')
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  for (const [name, value] of Object.entries(options.headers ?? {}))
    headers[name.toLowerCase()] = value
  for (const [name, value] of Object.entries(adapter.requestHeaders ?? {}))
    headers[name.toLowerCase()] = value
  const client = options.clientHeaders
  const connection = clientHeader(client, 'connection')?.toLowerCase()
  for (const name of options.forwardHeaders ?? readyAttemptDefaults.forwardHeaders) {
    const lower = name.toLowerCase()
    const value = clientHeader(client, lower)
    if (value !== undefined && !namedIn(connection, lower)) headers[lower] = value
  }
  const secret = context.key?.secret ?? options.credential
  if (secret !== undefined) {
    if (adapter.credentialHeader === undefined)
      throw notSent('request', `adapter "${adapter.name}" has no credentialHeader to send a key in`)
    const [name, value] = adapter.credentialHeader(secret)
    headers[name.toLowerCase()] = value
  }
  if (
    context.requestId !== undefined &&
    headers['x-client-request-id'] === undefined &&
    isFirstPartyApi(url)
  )
    headers['x-client-request-id'] = context.requestId
  const refused = unsendableHeader(headers)
  if (refused !== undefined) throw notSent('headers', `the header "${refused}" cannot be sent`)
  const body = serialised(request.body)
  if (body === undefined) throw notSent('body', 'the request body cannot be serialised as JSON')
  return { url, headers, body }
}

/**
 * What {@link "stream-boundary"!fetchAttempt | fetchAttempt} makes: an attempt function for a
 * relay with or without a pool.
 */
export type ReadyAttempt = (
  context: AttemptRequestContext & { readonly signal: AbortSignal },
) => Promise<Response>
