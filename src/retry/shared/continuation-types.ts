/**
 * The types of a continuation after a cut: the relay's continuation of one attempt, and the
 * record an outcome keeps of each. `continuation/continuation.ts` makes them.
 *
 * @module
 */

import type { PumpContinuation } from '../../commit/continuation.js'
import type { PumpEnd, PumpErrorCause } from '../../commit/pump-policy.js'
import type { TokenUsage } from '../../protocols/types.js'

/**
 * One continuation the relay tried after a cut, as the outcome records it.
 *
 * @group Relay
 */
export interface ContinuationRecord {
  /** Milliseconds from the start of the request to the cut. */
  readonly atMs: number
  /** How the upstream was cut. */
  readonly cause: PumpErrorCause
  /** The key of the continuation's last attempt (`null` without a pool or without an attempt). */
  readonly keyId: string | null
  /** Characters of answer text the client had received at the cut (prefilled). */
  readonly receivedChars: number
  /**
   * `spliced`: its output went to the client; `exhausted`: none was tried, every continuation
   * the policy allows (`maxContinuations`) was spent; `not-sound`: none was tried (tool
   * output, reasoning or a refusal seen, the text too long, or the adapter's
   * `buildContinuation` declined, threw or answered garbage); `failed`: its attempts got no
   * output; `restarted`: its answer began again with the text the client already had (the
   * request went out without the prefill, or the model ignored it), or ended while it still
   * repeated it, and was never appended; `prefill-refused`: the upstream refuses a prefill
   * for this model (`attempts: 1`), or did so on this route within the hour (`attempts: 0`,
   * no request); `unsupported`: no adapter of the route (nor, with `nextRoute`, of a later
   * route of its protocol) can continue a cut answer (`buildContinuation`,
   * `spliceContinuation`): OpenAI's own Chat API, Responses and Gemini cannot, and `openaiChat`
   * without a dialect (`openaiChatWith({ continuation })`) does not try (`attempts: 0`). The
   * client got the honest error for all but `spliced`.
   */
  readonly result:
    | 'spliced'
    | 'exhausted'
    | 'not-sound'
    | 'failed'
    | 'restarted'
    | 'prefill-refused'
    | 'unsupported'
  /** Its attempts (0 when not sound). */
  readonly attempts: number
  /** The token usage the continuation reported (the received text counts as its input). */
  readonly usage?: TokenUsage | undefined
  /**
   * The route the continuation was sent on and the model its request named: the cut's own
   * route, or a later one with `continueAfterCut.nextRoute`. Absent when none was sent.
   */
  readonly continuedOn?: { readonly route: string; readonly model: string | undefined } | undefined
}

/** The relay's continuation of one attempt: the pump asks it; the attempt closes it. */
export interface RelayContinuation extends PumpContinuation {
  /** Reports the last continuation's lease by how the stream ended (`undefined`: it threw). */
  close(end: PumpEnd | undefined): Promise<void>
  /** The answer's usage: the cut attempt's up to the cut, plus each continuation's. */
  usage(tracked: TokenUsage | undefined): TokenUsage | undefined
  /** The cut attempt's own usage: what its upstream reported up to the cut. */
  attemptUsage(tracked: TokenUsage | undefined): TokenUsage | undefined
  readonly records: readonly ContinuationRecord[]
}
