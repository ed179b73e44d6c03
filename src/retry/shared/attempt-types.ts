/**
 * What an attempt is given and gives back: the attempt function's context and credentials,
 * routes, what one attempt needs, and how it ended.
 *
 * @module
 */

import type { KeyPool } from '../../key-pool/types.js'
import type { StreamAdapter, UpstreamRequest } from '../../protocols/types.js'

/**
 * A key leased from the pool for one attempt.
 *
 * @group Relay
 */
export interface LeasedKey {
  readonly id: string
  /** Put it in the request's credential header; never log it. */
  readonly secret: string
  readonly metadata: Readonly<Record<string, unknown>> | undefined
}

/**
 * The request an attempt sends (`context.request`): the relay's `request` as adjusted, with
 * whether it is sent streaming.
 *
 * @group Relay
 */
export type AttemptRequest = UpstreamRequest & { readonly stream: boolean }

/**
 * What an attempt function is given, whatever owns the credentials. `Request` is the type of
 * `context.request`: {@link AttemptRequest} when `relay()` was given a `request` (its
 * overloads say so: no `undefined` to check), else possibly `undefined`.
 *
 * @group Relay
 */
export interface AttemptContextBase<
  Request extends AttemptRequest | undefined = AttemptRequest | undefined,
> {
  /**
   * Pass to `fetch`: it aborts when the client goes away, the pre-commit deadline passes, or
   * no response came within the first-byte bound.
   */
  readonly signal: AbortSignal
  /** 1 for the first attempt of the request, counting across routes. */
  readonly attemptNumber: number
  /** The route's name. */
  readonly route: string
  /**
   * The route's upstream protocol: its `credentialHeader` and `requestHeaders` say how to send
   * a key (the ready attempts, `fetchAttempt` and `nodeHttpAttempt`, read them).
   */
  readonly adapter: StreamAdapter
  /**
   * The request to send, when `relay` was given one: its body reflects adjustments
   * (`adjustRequest`, the context-window fit) and, for the non-streaming fallback, has
   * streaming off (`stream: false` here too), and, for a continuation, the prefilled request.
   * Send `JSON.stringify(request.body)`, never a body captured before `relay()` was called:
   * `fetchAttempt()` does this for you.
   */
  readonly request: Request
  /**
   * A correlation id for this attempt; send it as `x-client-request-id` to a provider's own
   * API (`isFirstPartyApi(url)`) so an attempt that timed out can be found in upstream logs
   * (a third-party host or strict proxy may refuse the header). `undefined` when
   * `correlationIds` is off.
   */
  readonly requestId: string | undefined
  /**
   * True when the previous attempt died of a connection reset or a broken pipe before any
   * response: a pooled keep-alive connection may be stale, so open a fresh one if you can.
   */
  readonly freshConnection: boolean
}

/**
 * What an attempt function is given when the relay leases keys from a pool.
 *
 * @group Relay
 */
export interface AttemptContext<
  Request extends AttemptRequest | undefined = AttemptRequest | undefined,
> extends AttemptContextBase<Request> {
  /** The leased key: put `secret` in the request's credential header. */
  readonly key: LeasedKey
}

/**
 * What an attempt function is given when the caller owns the credentials (no pool).
 *
 * @group Relay
 */
export interface CallerCredentialsContext<
  Request extends AttemptRequest | undefined = AttemptRequest | undefined,
> extends AttemptContextBase<Request> {
  /** No key: the attempt function sets its own credentials. */
  readonly key: undefined
}

/**
 * Makes one upstream request and returns its `Response`, whatever its status. The ready ones
 * are `fetchAttempt()` and `nodeHttpAttempt()` (`stream-boundary/node`); one of your own
 * sends `context.request` (never a body read before `relay()`), passes `context.signal`, and
 * does not follow redirects. An HTTP library's error for a 4xx/5xx (a `Response`, `status`,
 * `statusCode`, `response.status` or `response.statusCode` on it) is judged as that answer; a
 * throw before sending (a `TypeError`, a `RangeError`, a body that cannot be serialised) is the
 * request's failure, never the key's; the call is raced against the request's clocks.
 *
 * @group Relay
 */
export type AttemptFunction<
  Request extends AttemptRequest | undefined = AttemptRequest | undefined,
> = (context: AttemptContext<Request>) => Promise<Response>

/**
 * Makes one upstream request with the caller's own credentials (a relay without a pool).
 *
 * @group Relay
 */
export type CallerCredentialsAttemptFunction<
  Request extends AttemptRequest | undefined = AttemptRequest | undefined,
> = (context: CallerCredentialsContext<Request>) => Promise<Response>

/**
 * Where credentials come from: a key pool the relay leases from (`pool` and an
 * {@link AttemptFunction}), or the caller itself (no `pool`, and a
 * {@link CallerCredentialsAttemptFunction} that sets them: a user's own key, an Azure
 * `api-key`, a signed request). Without a pool, outcomes and hooks still work and report
 * `keyId: null`; an upstream 401/403 goes back to the client as the upstream said.
 *
 * @group Relay
 */
export type Credentials =
  | { readonly pool: KeyPool; readonly attempt: AttemptFunction }
  | { readonly pool?: undefined; readonly attempt: CallerCredentialsAttemptFunction }

/**
 * One way to serve the request: a protocol, credentials and an attempt function.
 *
 * @group Relay
 */
export type Route = Credentials & {
  /** A name for outcomes and hooks. */
  readonly name?: string
  readonly adapter: StreamAdapter
  /** This route's request (a fallback model's body); by default the relay's `request`. */
  readonly request?: UpstreamRequest
}

/**
 * An upstream HTTP error as it was sent: what the relay passes on when it gives up.
 *
 * @group Relay
 */
export interface UpstreamHttpError {
  readonly status: number
  readonly headers: Headers
  /** The body, bounded by `maxErrorBodyBytes`, secrets redacted. */
  readonly body: string
}

/**
 * What an attempt sends and where its answer goes: `stream` (a streaming request, relayed as a
 * stream), `whole` (a client's non-streaming request: the upstream's JSON answer goes to the
 * client as it is) or `non-streaming` (the fallback: a whole answer rendered as the stream).
 */
export type AttemptMode = 'stream' | 'whole' | 'non-streaming'
