/**
 * What one attempt is given (`AttemptInput`) and how it ends (`AttemptResult`): the contract
 * between `attempt/attempt.ts` and the route that starts it.
 *
 * @module
 */

import type { EofClass } from '../../classify/index.js'
import type { CommitGate } from '../../commit/gate-options.js'
import type { PumpEnd, StallStats } from '../../commit/pump-policy.js'
import type { KeyLease } from '../../key-pool/types.js'
import type { ResponseIdentity } from '../../protocols/identity.js'
import type { TokenUsage, UpstreamRequest } from '../../protocols/types.js'
import type { SignalLike } from '../../stop.js'
import type { AttemptMode, Route, UpstreamHttpError } from './attempt-types.js'
import type { ContinuationRecord, RelayContinuation } from './continuation-types.js'
import type { NormalizedRelayPolicy } from './policy-types.js'
import type { FailureVerdict } from './verdict.js'

/** What one attempt needs. */
export interface AttemptInput {
  readonly route: Route
  readonly routeName: string
  readonly attemptNumber: number
  readonly mode: AttemptMode
  /** In `whole` mode, a 2xx `text/event-stream` is relayed as a stream (the request said nothing). */
  readonly streamsOnEventStream?: boolean | undefined
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
      /**
       * The headers of the upstream's answer, when there was one (a 2xx that then stated an
       * error, too): a give-up passes on its request ids.
       */
      readonly headers?: Headers | undefined
      /** Token usage the attempt's stream reported before it failed (input billed), if any. */
      readonly usage?: TokenUsage | undefined
    }
