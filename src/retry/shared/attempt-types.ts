/**
 * What an attempt is given and gives back: the attempt function's context and credentials,
 * routes, what one attempt needs, and how it ended.
 *
 * @module
 */

import type { EofClass } from '../../classify/index.js'
import type { CommitGate } from '../../commit/gate.js'
import type { PumpEnd, StallStats } from '../../commit/pump-policy.js'
import type { KeyLease, KeyPool } from '../../key-pool/types.js'
import type { ResponseIdentity } from '../../protocols/identity.js'
import type { StreamAdapter, UpstreamRequest } from '../../protocols/types.js'
import type { TokenUsage } from '../../protocols/usage.js'
import type { SignalLike } from '../../stop.js'
import type { ContinuationRecord, RelayContinuation } from '../continuation/continuation.js'
import type { FailureVerdict } from '../decisions/classify.js'
import type { NormalizedRelayPolicy } from '../relay/policy.js'

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
 * What an attempt function is given, whatever owns the credentials.
 *
 * @group Relay
 */
export interface AttemptContextBase {
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
  readonly request: (UpstreamRequest & { readonly stream: boolean }) | undefined
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
export interface AttemptContext extends AttemptContextBase {
  /** The leased key: put `secret` in the request's credential header. */
  readonly key: LeasedKey
}

/**
 * What an attempt function is given when the caller owns the credentials (no pool).
 *
 * @group Relay
 */
export interface CallerCredentialsContext extends AttemptContextBase {
  /** No key: the attempt function sets its own credentials. */
  readonly key: undefined
}

/**
 * Makes one upstream request and returns its `Response`, whatever its status. The ready ones
 * are `fetchAttempt()` and `nodeHttpAttempt()` (`stream-boundary/node`); one of your own
 * sends `context.request` (never a body read before `relay()`), passes `context.signal`, and
 * does not follow redirects.
 *
 * @group Relay
 */
export type AttemptFunction = (context: AttemptContext) => Promise<Response>

/**
 * Makes one upstream request with the caller's own credentials (a relay without a pool).
 *
 * @group Relay
 */
export type CallerCredentialsAttemptFunction = (
  context: CallerCredentialsContext,
) => Promise<Response>

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

/** What one attempt needs. */
export interface AttemptInput {
  readonly route: Route
  readonly routeName: string
  readonly attemptNumber: number
  readonly mode: AttemptMode
  /** `undefined` when the caller owns the credentials. */
  readonly lease: KeyLease | undefined
  readonly request: (UpstreamRequest & { readonly stream: boolean }) | undefined
  readonly requestId: string | undefined
  readonly freshConnection: boolean
  readonly gate: CommitGate
  readonly policy: NormalizedRelayPolicy
  /** Aborts when the client is gone (or the host gave up). */
  readonly stop: SignalLike
  /** Aborts when the pre-commit budget ran out; ignored once committed. */
  readonly deadline: AbortSignal
  /** Milliseconds left in the pre-commit budget when the attempt starts. */
  readonly budgetMs: number
  /** The request's credentials, redacted by value from error frames relayed after commit. */
  readonly secrets?: readonly string[] | undefined
  /** Called once at commit, before anything is written. */
  readonly onCommit: () => void
  /** The upstream side is over (before the lease is reported, which may be a round trip). */
  readonly onEnd?: (() => void) | undefined
  /** Aborts when another attempt of the request won the client (hedging). */
  readonly lost?: AbortSignal | undefined
  /** Asked at the first output: `false` when another attempt already won the client. */
  readonly claim?: (() => boolean) | undefined
  /** Heals a cut after commit (`continueAfterCut`); closed when the attempt ends. */
  readonly continuation?: RelayContinuation | undefined
}

/** How an attempt ended. A discriminated union on `kind`. */
export type AttemptResult =
  | {
      readonly kind: 'committed'
      readonly status: number
      readonly end: PumpEnd
      readonly eof: EofClass | null
      readonly bytes: number
      readonly stalls: StallStats
      /** The token usage this attempt's upstream reported, when it did (up to a cut). */
      readonly usage?: TokenUsage | undefined
      /** The answer's usage when continuations added to it: this attempt's plus theirs. */
      readonly answerUsage?: TokenUsage | undefined
      /** The answer's id and model, as the upstream stated them. */
      readonly response?: ResponseIdentity | undefined
      /** The continuations tried after a cut, when any was. */
      readonly continuations?: readonly ContinuationRecord[] | undefined
    }
  | {
      readonly kind: 'failed'
      readonly verdict: FailureVerdict
      readonly status: number | null
      /** Why it stopped, when the request itself stopped it (or another attempt won). */
      readonly stopped?: 'client-gone' | 'deadline' | 'hedge-lost' | undefined
      /** The upstream's HTTP error, when it answered with one. */
      readonly upstream?: UpstreamHttpError | undefined
      /** Token usage the attempt's stream reported before it failed (input billed), if any. */
      readonly usage?: TokenUsage | undefined
    }
