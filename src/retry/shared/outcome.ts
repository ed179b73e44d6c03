/**
 * What `relay()` reports and is given: its options, the hooks it calls and the outcome it
 * resolves to. Never a secret, never a request body.
 *
 * @module
 */

import type { EofClass } from '../../classify/index.js'
import type { DownstreamSink } from '../../commit/gate-options.js'
import type { PumpEnd, StallStats } from '../../commit/pump-policy.js'
import type { ResponseIdentity } from '../../protocols/identity.js'
import type {
  RenderableError,
  StreamAdapter,
  TokenUsage,
  UpstreamRequest,
} from '../../protocols/types.js'
import type { Credentials } from './attempt-types.js'
import type { ContinuationRecord } from './continuation-types.js'
import type { RelayPolicy } from './policy-types.js'
import type { FailureReason } from './verdict.js'

/**
 * One attempt, as reported in outcomes and hooks. Never holds a secret.
 *
 * @group Relay
 */
export interface AttemptRecord {
  readonly attemptNumber: number
  readonly route: string
  readonly keyId: string | null
  /** `stream`, or `non-streaming` for the fallback. */
  readonly mode: 'stream' | 'non-streaming'
  /** The attempt's correlation id, when sent. */
  readonly requestId: string | undefined
  /** The upstream's HTTP status, when it answered. */
  readonly status: number | null
  /**
   * `running` while it runs, `committed`, `threw` (code threw under it), or the failure
   * reason (`empty`, `status-429`, `first-output-timeout`…).
   */
  readonly result: AttemptResultName
  /** Whether another attempt followed this one's failure (`false` for the committed one). */
  readonly retryable: boolean
  /** When the attempt started, in milliseconds from the start of the request. */
  readonly startedMs: number
  readonly durationMs: number
  /**
   * For a hedge, the attempt it hedged (which ran alongside it); `undefined` for an attempt
   * started as usual. A hedge that lost has `result: 'hedge-lost'`.
   */
  readonly hedgeOf?: number | undefined
  /**
   * Token usage the attempt's upstream reported before it ended, when it reported any: the
   * committed attempt's whole usage (up to the cut when its answer was continued: each
   * continuation's own is on its record, and the outcome's `usage` is the sum), or what a
   * failed or cancelled attempt was billed for where its protocol says (Anthropic's
   * `message_start` carries the input).
   */
  readonly usage?: TokenUsage | undefined
}

/**
 * Why a hedge slot passed without a hedge: the budget was spent, the route saw an overload
 * (hedging pauses), or no key could be had (every other key busy or cooling; one key and no
 * `sameKey`).
 *
 * @group Hedging
 */
export type HedgeSkipReason = 'budget' | 'overload' | 'no-free-key'

/**
 * What an {@link AttemptRecord} says of its attempt: a closed set, switchable exhaustively.
 *
 * @group Relay
 */
export type AttemptResultName = 'running' | 'committed' | 'threw' | FailureReason

/**
 * Why a request failed: an attempt's failure, the pool's answer, or code that threw.
 *
 * @group Relay
 */
export type RelayFailureReason = FailureReason | `threw:${string}`

/**
 * What hedging did in a request (see `policy.hedge`).
 *
 * @group Hedging
 */
export interface HedgeReport {
  /** Hedges started. */
  readonly started: number
  /** Attempts cancelled because another one reached the client first. */
  readonly cancelled: number
  /** The upstream time those cancelled attempts ran, summed, in milliseconds. */
  readonly cancelledMs: number
  /** Whether the attempt that answered was a hedge. */
  readonly wonByHedge: boolean
  /** Hedge slots that passed without a hedge, by reason. */
  readonly skipped: Readonly<Record<HedgeSkipReason, number>>
}

/**
 * What the client got, in one word: the top-level field to log and alert on.
 *
 * - `completed`: the whole answer (`ok: true`).
 * - `cut`: output went out, then the upstream did not finish it: a cut or the upstream's own
 *   error told as the protocol's error, or an ending the policy wrote in its place (a
 *   synthesized stop, promoted reasoning).
 * - `client-gone`: the client left (before or after output) or stopped reading; before any
 *   output, also the host giving up through its `signal`.
 * - `aborted`: after output, the host's own `signal` ended the stream.
 * - `refused`: no output; the client got a 4xx other than 429 saying its request cannot be
 *   served (the upstream's own 400, a 401 of the caller's own key, a request too large).
 * - `failed`: no output; the client got a 5xx or a 429 (every attempt failed, every key
 *   rate limited or busy, the gateway's own code threw).
 *
 * @group Relay
 */
export type RelayResult = 'completed' | 'cut' | 'client-gone' | 'aborted' | 'refused' | 'failed'

/**
 * How a relayed request ended. A discriminated union on `kind`; `ok` says in one boolean
 * whether the client got a complete answer, and `result` in one word what the client got
 * (completed, cut, client-gone, aborted, refused, failed): log and alert on them rather than
 * on `kind`.
 *
 * @example
 * const outcome = await relay({ sink, pool, adapter: openaiChat, attempt })
 * if (outcome.result === 'cut' || outcome.result === 'failed') log.warn('answer lost', outcome.result)
 *
 * @group Relay
 */
export type RelayOutcome = RequestFacts &
  (
    | {
        readonly kind: 'committed'
        /**
         * Whether the client got a complete answer: `true` only when the stream ended
         * `completed` (the upstream's own final event went out and the response was delivered:
         * the sink's `close()` resolved; after a cut, a spliced continuation that completed
         * counts) or the whole non-streaming answer was delivered. `false` for every other `end`:
         * an honest error frame after commit (a cut, a failed continuation, the upstream's own
         * error), a synthesized stop or promoted reasoning (the policy closed an answer the
         * upstream did not finish), the client gone, a stall, the host's abort before the end.
         * Once the response was delivered, nothing arriving later (an abort, `close`) makes
         * it `false`.
         */
        readonly ok: boolean
        /** What the client got: `completed` exactly when `ok` (see {@link RelayResult}). */
        readonly result: Extract<RelayResult, 'completed' | 'cut' | 'client-gone' | 'aborted'>
        readonly attempts: readonly AttemptRecord[]
        readonly route: string
        readonly keyId: string | null
        /** `non-streaming` when the answer came from the non-streaming fallback. */
        readonly mode: 'stream' | 'non-streaming'
        /** From the start of the request to the first output. */
        readonly timeToFirstOutputMs: number
        readonly end: PumpEnd
        readonly eof: EofClass | null
        readonly bytes: number
        /** Gaps between upstream frames after commit longer than the stall threshold. */
        readonly stalls: StallStats
        readonly durationMs: number
        /** What hedging did; `undefined` when the policy has no `hedge`. */
        readonly hedges?: HedgeReport | undefined
        /**
         * Token usage the upstream reported for the answer the client got (OpenAI Chat reports
         * it only when the request sets `stream_options: { include_usage: true }`);
         * `undefined` when it reported none. Every attempt's own is on its record.
         */
        readonly usage?: TokenUsage | undefined
        /** The answer's id and the model that wrote it, as the upstream stated them. */
        readonly response?: ResponseIdentity | undefined
        /**
         * The continuations tried after a cut (`continueAfterCut`), in order; absent when the
         * stream was never cut after commit or continuation is off. `usage` then sums the
         * cut answer's and every continuation's.
         */
        readonly continuations?: readonly ContinuationRecord[] | undefined
      }
    | {
        readonly kind: 'failed'
        /** Always `false`: every attempt failed before output; the client got an error. */
        readonly ok: false
        /** `refused` for a 4xx other than 429, else `failed` (see {@link RelayResult}). */
        readonly result: Extract<RelayResult, 'refused' | 'failed'>
        readonly attempts: readonly AttemptRecord[]
        /** The status the client got (or the in-band error's status with early headers). */
        readonly status: number
        readonly error: RenderableError
        readonly reason: RelayFailureReason
        readonly retryAfterMs: number | undefined
        readonly durationMs: number
      }
    | {
        readonly kind: 'client-gone'
        /** Always `false`: the client left (or the host gave up) before any output. */
        readonly ok: false
        readonly result: 'client-gone'
        readonly attempts: readonly AttemptRecord[]
        readonly durationMs: number
      }
  )

/**
 * A {@link RelayOutcome} as the engine builds it, before `relay()` adds `ok` and `result`
 * (internal).
 */
export type EngineOutcome = RelayOutcome extends infer Each
  ? Each extends RelayOutcome
    ? Omit<Each, 'ok' | 'result'>
    : never
  : never

/** What each way a committed stream can end tells the client: a table the compiler keeps complete. */
const resultOfEnd = {
  completed: 'completed',
  'upstream-error': 'cut',
  'error-written': 'cut',
  'stop-synthesized': 'cut',
  'reasoning-promoted': 'cut',
  'client-gone': 'client-gone',
  'downstream-stalled': 'client-gone',
  aborted: 'aborted',
} as const satisfies Record<PumpEnd['kind'], RelayResult>

/**
 * What `outcome.result` is (see {@link RelayResult}); `completed` exactly when
 * {@link isCompleteAnswer}.
 */
export function resultOf(outcome: EngineOutcome): RelayResult {
  switch (outcome.kind) {
    case 'committed':
      return resultOfEnd[outcome.end.kind]
    case 'failed':
      return outcome.status >= 400 && outcome.status < 500 && outcome.status !== 429
        ? 'refused'
        : 'failed'
    case 'client-gone':
      return 'client-gone'
  }
}

/**
 * What `outcome.ok` is: the client got a complete answer (see {@link RelayOutcome}). The one
 * place it is decided; the OpenTelemetry span's status agrees with it.
 */
export function isCompleteAnswer(outcome: EngineOutcome): boolean {
  return outcome.kind === 'committed' && outcome.end.kind === 'completed'
}

/**
 * What every {@link RelayOutcome} says of the request itself (set by `relay()`).
 *
 * @group Relay
 */
export interface RequestFacts {
  /** The upstream protocol: the relay's adapter's name (`openai-chat`…). */
  readonly protocol?: string | undefined
  /**
   * The model the request asked for: `request.body.model`, or the model in a Gemini URL;
   * `undefined` when the relay was given no `request`.
   */
  readonly model?: string | undefined
}

/**
 * Hooks, each given a frozen context. A hook that throws is ignored.
 *
 * @group Relay
 */
export interface RelayHooks {
  /** An attempt starts, with the key it leased. */
  onAttempt?(context: {
    readonly attemptNumber: number
    readonly route: string
    readonly keyId: string | null
    readonly mode: 'stream' | 'non-streaming'
    readonly requestId: string | undefined
  }): void
  /**
   * A failed attempt is followed by another, once its key is leased: why the last one failed
   * and how long the wait for the next key took.
   */
  onRetry?(context: {
    readonly attemptNumber: number
    readonly reason: string
    readonly delayMs: number
    readonly nextKeyId: string | null
    readonly route: string
  }): void
  /**
   * A hedge starts: the attempt it hedges had no visible output after `afterMs`, and the
   * budget allowed one more attempt on a free key.
   */
  onHedge?(context: {
    readonly attemptNumber: number
    /** The attempt still running that this one hedges. */
    readonly hedgeOf: number
    readonly route: string
    readonly keyId: string | null
    /** The delay that passed, fixed or adaptive. */
    readonly afterMs: number
  }): void
  /**
   * A hedge's moment came and no hedge started: the budget was spent, hedging is paused
   * after an overload, or no key could be had.
   */
  onHedgeSkipped?(context: {
    /** The attempts started so far. */
    readonly attemptNumber: number
    readonly route: string
    readonly reason: HedgeSkipReason
    /** Milliseconds since the race's first attempt started. */
    readonly afterMs: number
  }): void
  /**
   * A cut after commit was met by `continueAfterCut`: called when a continuation's output
   * begins to reach the client (`spliced`), or when none could be (`not-sound`, `failed`,
   * `restarted`, `prefill-refused`: the client then gets the honest error). `attemptNumber`
   * is the cut attempt's.
   */
  onContinuation?(
    context: Readonly<ContinuationRecord & { attemptNumber: number; route: string }>,
  ): void
  /** The first output arrived and the attempt commits, before anything is written. */
  onCommit?(context: {
    readonly attemptNumber: number
    readonly route: string
    readonly keyId: string | null
    readonly timeToFirstOutputMs: number
  }): void
  /** Every attempt failed before commit; the client gets `status`. */
  onGiveUp?(context: {
    readonly status: number
    readonly reason: string
    readonly attempts: readonly AttemptRecord[]
  }): void
  /** The request is over: the outcome `relay()` resolves to. */
  onOutcome?(outcome: RelayOutcome): void
}

/**
 * Options of {@link relay}. Credentials come from a `pool` (the attempt function gets a
 * leased key) or from the caller (no `pool`: the attempt function sets its own).
 *
 * @group Relay
 */
export type RelayOptions = RelayRequestOptions & Credentials

/**
 * Options of {@link relay} besides the credentials.
 *
 * @group Relay
 */
export interface RelayRequestOptions {
  /** Where the response goes (`webSink().sink`, `nodeSink(res)`). */
  readonly sink: DownstreamSink
  readonly adapter: StreamAdapter
  /** The first route's name. @default 'primary' */
  readonly name?: string
  readonly policy?: RelayPolicy
  /** The host's signal (the client request's), if it has one besides the sink's. */
  readonly signal?: AbortSignal | undefined
  readonly hooks?: RelayHooks
  /**
   * The request's JSON body (and URL), when the relay may rewrite it: for `adjustRequest`,
   * `fitContextWindow` and the non-streaming fallback. Attempts get it as `context.request`.
   * It also says whether the client asked for a stream (see `stream`).
   */
  readonly request?: UpstreamRequest
  /**
   * Whether the client asked for a stream. A client that did not gets a whole answer: each
   * attempt's 2xx JSON is read whole (bounded), judged like a stream's first output (a JSON
   * error or an answer without output is retried), and sent as it came (status kept, headers
   * through the allowlist). Failures are decided and answered exactly as for a stream.
   * When the request says nothing (a body without `stream` at a URL the adapter does not know
   * as streaming: a two-stage gateway's request in another protocol than its answer), the
   * answer decides: a 2xx `text/event-stream` is relayed as a stream, a JSON one sent whole.
   * A two-stage gateway states its client's wish here.
   * @default from `request`: `"stream": true` in its body or the adapter's
   * `isStreamingRequest` for its URL (Gemini's `:streamGenerateContent`), `false` for
   * `"stream": false`, else the answer's content type; `true` without `request`
   */
  readonly stream?: boolean
  /**
   * Credentials the host put on its attempts besides leased keys (a caller's own key, an
   * Azure `api-key`): redacted by exact value, like every leased key, from everything the
   * relay writes or reports (error bodies and frames, outcomes, hooks). Values shorter than
   * 6 characters are not redacted.
   */
  readonly secrets?: readonly string[]
}
