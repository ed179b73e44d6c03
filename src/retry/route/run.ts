import type { CommitGate } from '../../commit/gate-options.js'
import type { StreamAdapter, UpstreamRequest } from '../../protocols/types.js'
import type { SignalLike } from '../../stop.js'
import {
  nextRouteProgress,
  type RouteEvent,
  type RouteProgress,
} from '../decisions/route-progress.js'
import type { AttemptResult } from '../shared/attempt-io.js'
import type { Route, UpstreamHttpError } from '../shared/attempt-types.js'
import type { AttemptRecord, EngineOutcome, HedgeReport, RelayHooks } from '../shared/outcome.js'
import type { NormalizedRelayPolicy } from '../shared/policy-types.js'
import type { FailureVerdict } from '../shared/verdict.js'
import { recordOverload } from './hedge.js'

/** One request's shared state: what every route and attempt of it reads and adds to. */
export interface Run {
  /** The primary route's adapter (guarded). */
  readonly adapter: StreamAdapter
  /** The request's JSON body and URL, when the relay was given one. */
  readonly request: UpstreamRequest | undefined
  readonly config: NormalizedRelayPolicy
  readonly hooks: RelayHooks
  readonly gate: CommitGate
  readonly routes: readonly Route[]
  readonly attempts: AttemptRecord[]
  /** The client asked for a whole answer (not a stream): it gets the upstream's JSON as it is. */
  readonly whole: boolean
  /**
   * The request did not say whether the client wants a stream (a two-stage gateway's request
   * in another protocol than the answer's): a whole request's 2xx event stream is relayed as
   * a stream.
   */
  readonly answerDecides: boolean
  /**
   * The exact credentials this request put on its attempts (the host's, then each leased
   * key as it is leased): redacted by value from everything that leaves the relay.
   */
  readonly secrets: string[]
  /** Aborts when the client is gone or the host gave up. */
  readonly stop: SignalLike
  /** Aborts when the pre-commit budget ran out. */
  readonly deadline: AbortSignal
  /** Aborts on either: what waits for a key listen to. */
  readonly waits: AbortSignal
  readonly started: number
  readonly deadlineAt: number
  attemptNumber: number
  last:
    | {
        verdict: FailureVerdict
        adapter: StreamAdapter
        /** The upstream's HTTP error, passed on as it was when this verdict ends the request. */
        upstream: UpstreamHttpError | undefined
        /** The headers the upstream answered with, if it did: a give-up passes on their ids. */
        headers: Headers | undefined
        /** Whether the key came from a pool (its 401/403 is the gateway's, not the client's). */
        pooled: boolean
      }
    | undefined
  /** The previous attempt died of a reset or broken pipe before any response. */
  freshConnection: boolean
  /** `onGiveUp` was called (it is called at most once). */
  gaveUp: boolean
  /** What hedging did over the request's races, when the policy hedges. */
  hedges: HedgeReport | undefined
}

/** How a route ended. */
export type RouteEnd =
  | { readonly kind: 'committed'; readonly outcome: EngineOutcome }
  | { readonly kind: 'next-route' }
  | { readonly kind: 'give-up'; readonly verdict: FailureVerdict }
  | { readonly kind: 'client-gone' }

/** One route of a request: what it is, and where it stands. */
export interface RouteRun {
  readonly route: Route
  readonly name: string
  readonly hasNextRoute: boolean
  /** Where the route stands: replaced only by {@link advance}. */
  progress: RouteProgress
}

/** Records what happened on a route: its progress becomes `nextRouteProgress(progress, event)`. */
export function advance(route: RouteRun, event: RouteEvent): void {
  route.progress = nextRouteProgress(route.progress, event)
}

/**
 * Brings the request's state up to date after a failed attempt: what the give-up would
 * say, the route's overload count, whether the next connection should be fresh, and the
 * hedging pause after an overload.
 */
export function noteFailure(
  run: Run,
  route: RouteRun,
  result: Extract<AttemptResult, { kind: 'failed' }>,
  verdict = result.verdict,
): void {
  if (result.stopped === undefined) {
    run.last = {
      verdict,
      adapter: route.route.adapter,
      upstream: result.upstream,
      headers: result.upstream?.headers ?? result.headers,
      pooled: route.route.pool !== undefined,
    }
  }
  advance(route, { kind: 'failed', verdict })
  if (verdict.overload && run.config.hedge !== undefined) {
    recordOverload(run.config.hedge, route.name)
  }
  run.freshConnection = verdict.staleConnection === true
}
