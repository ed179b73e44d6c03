/**
 * `createResilientFetch()`: a function with `fetch`'s signature that an SDK can be given
 * (`new OpenAI({ fetch })`, `new Anthropic({ fetch })`), so its streaming requests retry
 * inside the pre-output window and its callers see one clean stream or one honest error.
 *
 * @module
 */

import { settleWithin } from '../../call-safely.js'
import { webSink } from '../../commit/web-sink.js'
import { RequestNotSentError } from '../../errors.js'
import type { KeyPool } from '../../key-pool/types.js'
import { positiveInteger, rejectUnknownKeys } from '../../options.js'
import { adapterForUrl } from '../../protocols/adapter-for-url.js'
import { parseObject } from '../../protocols/common.js'
import { streamFlagInBody } from '../../protocols/request.js'
import type { StreamAdapter, UpstreamRequest } from '../../protocols/types.js'
import { isFirstPartyApi } from '../request/correlation.js'
import { readRequestBody, requestBodyDefaults } from '../request/request-body.js'
import type { AttemptContextBase, LeasedKey } from '../shared/attempt-types.js'
import type { RelayHooks, RelayOutcome } from '../shared/outcome.js'
import type { NormalizedRelayPolicy, RelayPolicy } from '../shared/policy-types.js'
import { checkSetup, compileRelay, type RelayPlan, relayKeys } from './compile.js'
import { checkAdapterOptions, normalizeRelayPolicy } from './policy.js'
import { runRelay } from './relay.js'

/**
 * A `fetch`-compatible function.
 *
 * @group Fetch wrapper
 */
export type FetchFunction = (input: string | URL | Request, init?: RequestInit) => Promise<Response>

/**
 * Options of {@link createResilientFetch}.
 *
 * @group Fetch wrapper
 */
export interface ResilientFetchOptions {
  /**
   * The `fetch` that reaches the upstream.
   * @default globalThis.fetch
   */
  fetch?: FetchFunction
  /**
   * The protocol; by default picked per request from its URL by `adapterForUrl`
   * (`/chat/completions`, `/responses`, `/messages`, `:streamGenerateContent`, `:generateContent`). Requests it
   * cannot place pass through. With a `pool`, the adapter must have `credentialHeader`
   * (all shipped ones do), else creating the fetch throws a `TypeError`.
   */
  adapter?: StreamAdapter
  /**
   * Keys to rotate. When given, each attempt sets the adapter's `credentialHeader`
   * (`authorization: Bearer`, `x-api-key`, `x-goog-api-key`) from the leased key, replacing
   * the SDK's. Without it the SDK's own credential is used for every attempt.
   */
  pool?: KeyPool
  /** How requests are retried and ended (see `relay`): streaming and non-streaming alike. */
  policy?: RelayPolicy
  hooks?: RelayHooks
  /** Called with every request's outcome, streaming or not. */
  onOutcome?: (outcome: RelayOutcome) => void
  /**
   * The largest request body buffered for resending. A bigger one (declared by
   * `content-length`, or streamed) is refused with a `RequestBodyTooLargeError` before any
   * upstream attempt, and a streamed body is not read past the bound.
   * @default 33_554_432 (32 MiB, Anthropic's Messages request limit)
   * @example { maxRequestBodyBytes: 8 * 1024 * 1024 }
   */
  maxRequestBodyBytes?: number
}

/**
 * Defaults of {@link ResilientFetchOptions}.
 *
 * @group Fetch wrapper
 */
export const resilientFetchDefaults: { readonly maxRequestBodyBytes: number } = Object.freeze({
  maxRequestBodyBytes: requestBodyDefaults.maxRequestBodyBytes,
})

const clientRequestIdHeader = 'x-client-request-id'

/** Headers that carry a credential in the shipped protocols (and Azure's `api-key`). */
const credentialHeaders = ['authorization', 'x-api-key', 'x-goog-api-key', 'api-key'] as const

/**
 * The caller's own credentials on a request (header values, a scheme word dropped, and a
 * `key` query parameter): the library sends them on every attempt, so it redacts them too.
 */
function callerSecrets(headers: Headers, url: URL): string[] {
  const found: string[] = []
  for (const name of credentialHeaders) {
    const value = headers.get(name)
    if (value === null) continue
    found.push(value)
    const token = /^\S+\s+(\S+)$/.exec(value)?.[1]
    if (token !== undefined) found.push(token)
  }
  const key = url.searchParams.get('key')
  if (key !== null) found.push(key)
  return found
}

function withCredential(headers: Headers, adapter: StreamAdapter, secret: string): Headers {
  const out = new Headers(headers)
  // Checked when createResilientFetch() is called: an adapter that reaches here with a pool has the member.
  const [name, value] = (adapter.credentialHeader as (secret: string) => readonly [string, string])(
    secret,
  )
  out.set(name, value)
  return out
}

/** Whether the request asks for a stream, in the adapter's terms (`stream: true` without one). */
function isStreaming(adapter: StreamAdapter, url: URL, body: string | undefined): boolean {
  return (adapter.isStreamingRequest ?? streamFlagInBody)(url, body)
}

/** The constructor of Node's built-in fetch dispatcher (undici's `Agent`), where there is one. */
type DispatcherConstructor = new (options: { pipelining: number }) => unknown

/**
 * Request options for an attempt that must not reuse a pooled keep-alive connection (the one
 * before it died of a reset or a broken pipe before any response, so the pool may hold more
 * stale sockets). On Node, whose `fetch` is undici, a one-off dispatcher opens a new
 * connection; elsewhere `connection: close` is the only hint a `fetch` can give.
 */
function freshConnectionInit(): Record<string, unknown> {
  const global = (globalThis as Record<symbol, unknown>)[Symbol.for('undici.globalDispatcher.1')]
  const Dispatcher = (global as { constructor?: unknown } | undefined)?.constructor
  if (typeof Dispatcher !== 'function' || Dispatcher === Object) return {}
  return { dispatcher: new (Dispatcher as DispatcherConstructor)({ pipelining: 0 }) }
}

/** Every option of {@link createResilientFetch}: a table the compiler keeps complete. */
const optionKeys = Object.keys({
  fetch: true,
  adapter: true,
  pool: true,
  policy: true,
  hooks: true,
  onOutcome: true,
  maxRequestBodyBytes: true,
} satisfies Record<keyof ResilientFetchOptions, true>)

/**
 * Creates a `fetch` that retries streaming LLM requests inside the pre-output window. The
 * request body is buffered once so it can be sent again, up to `maxRequestBodyBytes` (past it
 * the call rejects with a `RequestBodyTooLargeError` and nothing is sent). A caller's own
 * `x-client-request-id` is kept on every attempt; without one, every attempt (streaming or
 * not) to a provider's own API ({@link isFirstPartyApi}) gets a fresh id unless
 * `policy.correlationIds` is `false` (other hosts are not sent a header they may refuse; the
 * id is still in the outcome's records). A streaming request resolves to a
 * `Response` whose body is the committed stream (peeked frames, then the rest), or to the
 * final error status with a JSON body in the protocol's shape; the SDK sees one clean
 * stream or one honest error. Non-streaming requests go through the same engine (`relay` with
 * `stream: false`): the same keys, bounds, waits and give-up answers, and a 2xx JSON answer
 * returned as the upstream gave it.
 *
 * @example
 * import OpenAI from 'openai'
 * const client = new OpenAI({ fetch: createResilientFetch({ policy: { peek: { firstOutputTimeoutMs: 20_000 } } }) })
 *
 * @group Fetch wrapper
 */
export function createResilientFetch(options: ResilientFetchOptions = {}): FetchFunction {
  rejectUnknownKeys('createResilientFetch', options, optionKeys)
  const inner: FetchFunction = options.fetch ?? ((input, init) => globalThis.fetch(input, init))
  const maxRequestBodyBytes = positiveInteger(
    'maxRequestBodyBytes',
    options.maxRequestBodyBytes ?? resilientFetchDefaults.maxRequestBodyBytes,
  )
  // A bad policy fails here, when createResilientFetch() is called, not on the first request:
  // it is checked once, and each protocol's relay is built once over it (guarantee 30).
  const policy = normalizeRelayPolicy(options.policy)
  if (options.adapter !== undefined) checkAdapterOptions(policy, options.adapter)
  checkCredentialHeader(options)
  const plans = new Map<StreamAdapter, RelayPlan>()
  if (options.adapter !== undefined)
    plans.set(options.adapter, planOf(options, options.adapter, policy))

  return async function resilientFetch(input, init) {
    const incoming = new Request(input, init)
    const url = new URL(incoming.url)
    const adapter = options.adapter ?? adapterForUrl(url)
    if (adapter === undefined) return inner(input, init)
    // Picked by URL: built on its first request, so the caller's request rejects with what is wrong.
    let plan = plans.get(adapter)
    if (plan === undefined) {
      plan = planOf(options, adapter, policy)
      plans.set(adapter, plan)
    }
    const body = await readBody(incoming, maxRequestBodyBytes)
    const headers = new Headers(incoming.headers)
    // The caller's own id names the request in its logs: every attempt keeps it. The
    // library's own per-attempt ids go to the providers' own APIs only.
    const callerRequestId = headers.get(clientRequestIdHeader) ?? undefined
    const sendsIds = isFirstPartyApi(url)
    const callerSignal = init?.signal ?? undefined
    const send = (
      secret: string | undefined,
      signal: AbortSignal,
      request?: UpstreamRequest,
      requestId?: string,
      fresh = false,
    ) => {
      const sentHeaders =
        secret === undefined ? new Headers(headers) : withCredential(headers, adapter, secret)
      const id = callerRequestId ?? (sendsIds ? requestId : undefined)
      if (id !== undefined) sentHeaders.set(clientRequestIdHeader, id)
      const sentBody =
        request === undefined || request.body === parsed ? body : serialise(request.body)
      return inner(request?.url ?? url.toString(), {
        method: incoming.method,
        headers: sentHeaders,
        ...(sentBody === undefined ? {} : { body: sentBody }),
        signal,
        // A key never follows a redirect (to another origin or not): a 3xx is a failure.
        redirect: 'manual',
        ...(fresh ? freshConnectionInit() : {}),
      })
    }
    const parsed = body === undefined ? undefined : parseObject(body)
    const asked = isStreaming(adapter, url, body)
    const { sink, response } = webSink()
    // Streaming or not, one engine decides every attempt: the same keys, waits, bounds,
    // give-up answers, hooks and outcome. The attempt's signal already follows the caller's
    // (the relay's `signal`). Without a pool the SDK's own credential goes on every attempt,
    // and its 401 is the caller's own.
    const relayed = runRelay(plan, {
      sink,
      signal: callerSignal,
      // A JSON body that names no stream, at a URL that is not a streaming one, leaves it to
      // the answer (a two-stage fetch: the URL is another protocol's than the adapter's).
      ...(asked || parsed === undefined || typeof parsed.stream === 'boolean'
        ? { stream: asked }
        : {}),
      secrets: callerSecrets(headers, url),
      // The JSON body goes in as the relay's request, so it can be adjusted or sent without streaming.
      ...(parsed === undefined ? {} : { request: { url: url.toString(), body: parsed } }),
      attempt: ({ key, signal, request, requestId, freshConnection }: AnyAttemptContext) =>
        send(key?.secret, signal, request, requestId, freshConnection),
    })
    // A relay that throws (a bad option) must not leave the caller waiting, nor may a
    // throwing onOutcome become an unhandled rejection.
    relayed.then(
      (outcome) => {
        try {
          options.onOutcome?.(outcome)
        } catch {
          // The caller's own callback: its failure is not the request's.
        }
      },
      (error: unknown) => sink.abort(error),
    )
    return response
  }
}

/** What an attempt is given, with a pool's key or without. */
type AnyAttemptContext = AttemptContextBase & { readonly key: LeasedKey | undefined }

/** The relay of one protocol, built once over the checked policy. */
function planOf(
  options: ResilientFetchOptions,
  adapter: StreamAdapter,
  policy: NormalizedRelayPolicy,
): RelayPlan {
  const { pool, hooks } = options
  const setup = {
    adapter,
    ...(pool === undefined ? {} : { pool }),
    ...(options.policy === undefined ? {} : { policy: options.policy }),
    ...(hooks === undefined ? {} : { hooks }),
  }
  // The attempt is made per request (it sends that request's headers and body).
  checkSetup('relay', setup, relayKeys, true)
  return compileRelay(setup, policy)
}

/** A request body the relay changed, as JSON; one that cannot be is never sent (invariant 28). */
function serialise(body: unknown): string {
  try {
    return JSON.stringify(body)
  } catch (error) {
    throw new RequestNotSentError('body', 'the request body cannot be serialised as JSON', {
      cause: error,
    })
  }
}

/** A pool's keys need a header to travel in: never guess one for a custom adapter. */
function checkCredentialHeader(options: ResilientFetchOptions): void {
  const { adapter, pool } = options
  if (pool === undefined || adapter === undefined || adapter.credentialHeader !== undefined) return
  throw new TypeError(
    `createResilientFetch: adapter "${adapter.name}" has no credentialHeader, so keys from pool cannot be sent; implement StreamAdapter.credentialHeader or leave out pool`,
  )
}

/**
 * The request body as text, at most `limit` bytes of it. A streamed body that passes the
 * bound is cancelled, so its producer stops; nothing was sent upstream.
 */
async function readBody(incoming: Request, limit: number): Promise<string | undefined> {
  try {
    const bytes = await readRequestBody(incoming.body, {
      maxRequestBodyBytes: limit,
      contentLength: incoming.headers.get('content-length'),
    })
    return bytes === undefined ? undefined : new TextDecoder().decode(bytes)
  } catch (error) {
    await settleWithin(incoming.body?.cancel(error))
    throw error
  }
}
