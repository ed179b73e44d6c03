/**
 * A continuation's attempts on one route: a key leased for each, its request sent, its answer
 * peeked up to the first output and held past the frames that repeat the received text, within
 * the continuation's budget; every lease but the one with output reported here, once.
 *
 * @module
 */

import { now, settleWithin } from '../../call-safely.js'
import { createStreamTracker, type StreamTracker } from '../../classify/index.js'
import type { ContinuedStream, CutContext } from '../../commit/continuation.js'
import { StreamTimeoutError } from '../../errors.js'
import { followSignals } from '../../follow-signals.js'
import type { KeyLease, KeyOutcome, KeyPool } from '../../key-pool/types.js'
import { type PeekOutcome, peekDefaults, peekOn } from '../../peek/index.js'
import type {
  ContinuationSplice,
  StreamAdapter,
  TokenUsage,
  UpstreamRequest,
} from '../../protocols/types.js'
import { frameReaderOn } from '../../sse/reader.js'
import { frameSourceOf } from '../../sse/sources.js'
import { callAttemptFunction, leasedKeyOf } from '../attempt/call-attempt.js'
import { classifyAttemptFailure } from '../decisions/classify.js'
import { type Held, type HoldBounds, holdRepeats } from '../decisions/continuation-restart.js'
import { errorFromBody, readBounded } from '../decisions/error-body.js'
import { estimateRequestCost } from '../request/request-cost.js'
import type { Route } from '../shared/attempt-types.js'
import type { ContinueAfterCutOptions, NormalizedRelayPolicy } from '../shared/policy-types.js'
import type { FailureVerdict } from '../shared/verdict.js'
import { isPrefillRefusal } from './prefill-refusals.js'

/** What a continuation's attempts read of its input (`ContinuationInput` on the route tried). */
export interface AttemptsInput {
  readonly route: Route
  readonly routeName: string
  readonly adapter: StreamAdapter
  readonly policy: NormalizedRelayPolicy
  readonly config: Pick<Required<ContinueAfterCutOptions>, 'maxAttempts' | 'timeoutMs'>
  /** The key of the cut attempt (tried elsewhere first). */
  readonly keyId: string | null
  /** The next attempt number of the request. */
  nextAttemptNumber(): number
  /** A leased key's secret, redacted by value from everything that leaves the relay. */
  addSecret(secret: string): void
}

/** A continuation's request, its splice, and the text it continues. */
export interface Parts {
  readonly request: UpstreamRequest
  readonly splice: ContinuationSplice
  readonly received: string
}

/** How a continuation attempt ended. */
export type Tried =
  | {
      kind: 'output'
      stream: ContinuedStream
      usage: () => TokenUsage | null
      /** The response's headers: the key's headroom is read from them when it is reported. */
      headers: Headers
    }
  | { kind: 'failed'; verdict: FailureVerdict | undefined }
  /** Its answer began again with the received text (see `continuation-restart.ts`). */
  | { kind: 'restarted'; usage: TokenUsage | null }
  /** The upstream refuses a prefill for this model (see `prefill-refusals.ts`). */
  | { kind: 'refused' }

/** A continuation's attempts: the last one's end, and the lease of one with output. */
export interface Attempted {
  readonly tried: Tried
  /** The lease of the attempt with output (the others are reported). */
  readonly lease: KeyLease | undefined
  readonly keyId: string | null
  readonly attempts: number
}

/** What a continuation attempt that got no output says about its key. */
function leaseOutcome(tried: Exclude<Tried, { kind: 'output' }>): KeyOutcome {
  if (tried.kind === 'refused') return { kind: 'rejected' }
  if (tried.kind === 'restarted') return { kind: 'cancelled' }
  return tried.verdict?.key ?? { kind: 'cancelled' }
}

/**
 * A continuation's attempts within its budget, each on a key of its own, until one has
 * output; a refusal, a restart or a failure that is not retryable ends them (another try
 * would meet the same). Every lease but the one with output is reported here, once.
 */
export async function attemptAll(
  input: AttemptsInput,
  parts: Parts,
  signal: CutContext['signal'],
): Promise<Attempted> {
  const budget = followSignals([signal])
  const timer = Number.isFinite(input.config.timeoutMs)
    ? setTimeout(
        () =>
          budget.controller.abort(new StreamTimeoutError('first-output', input.config.timeoutMs)),
        input.config.timeoutMs,
      )
    : undefined
  let attempts = 0
  let keyId: string | null = null
  let tried: Tried = { kind: 'failed', verdict: undefined }
  try {
    while (attempts < input.config.maxAttempts && !budget.controller.signal.aborted) {
      const lease = await leaseFor(input, parts, budget.controller.signal)
      if (lease === null) break
      attempts++
      keyId = lease?.keyId ?? null
      if (lease !== undefined) input.addSecret(lease.secret)
      // Never throws by design; a throw all the same still reports the lease, once.
      tried = await tryOnce(input, parts, lease, budget.controller).catch(
        (): Tried => ({ kind: 'failed', verdict: undefined }),
      )
      if (tried.kind === 'output') return { tried, lease, keyId, attempts }
      await lease?.report(leaseOutcome(tried)).catch(() => {})
      if (tried.kind !== 'failed' || tried.verdict?.retryable !== true) break
    }
  } finally {
    clearTimeout(timer)
    budget.release()
  }
  return { tried, lease: undefined, keyId, attempts }
}

/**
 * A key for a continuation: a free key other than the cut one first, else any, waiting
 * within the budget; `undefined` with the caller's own credentials, `null` when none.
 */
async function leaseFor(
  input: AttemptsInput,
  parts: Parts,
  signal: AbortSignal,
): Promise<KeyLease | undefined | null> {
  const pool: KeyPool | undefined = input.route.pool
  if (pool === undefined) return undefined
  try {
    const exclude = input.keyId === null ? undefined : new Set([input.keyId])
    const cost = estimateRequestCost(parts.request)
    const other = await pool.acquire({ exclude, cost })
    if (other.kind === 'leased') return other.lease
    const any = await pool.acquire({ waitMs: input.policy.maxWaitMs, signal, cost })
    return any.kind === 'leased' ? any.lease : null
  } catch {
    return null
  }
}

/** How far a continuation is held past the frames that repeat received text: a peek's bounds. */
function holdBounds(policy: NormalizedRelayPolicy): HoldBounds {
  return {
    maxFrames: policy.peek.maxPeekFrames ?? peekDefaults.maxPeekFrames,
    maxBytes: policy.peek.maxPeekBytes ?? peekDefaults.maxPeekBytes,
  }
}

/** The relay's peek options for a continuation (its tracker keeps no text: the client's does). */
function peekOptions(policy: NormalizedRelayPolicy) {
  return { ...policy.peek, trackerOptions: undefined }
}

/** One continuation attempt, up to its first output. Never throws. */
async function tryOnce(
  input: AttemptsInput,
  parts: Parts,
  lease: KeyLease | undefined,
  budget: AbortController,
): Promise<Tried> {
  const attempt = followSignals([budget.signal])
  try {
    const started = now()
    const sent = await send(input, parts, lease, attempt.controller.signal)
    if (!(sent instanceof Response)) return sent
    return await readAnswer(input, parts, sent, started, attempt.controller)
  } finally {
    attempt.release()
  }
}

/** Sends the attempt's request: the upstream's response, or how the attempt failed without one. */
async function send(
  input: AttemptsInput,
  parts: Parts,
  lease: KeyLease | undefined,
  signal: AbortSignal,
): Promise<Response | Tried> {
  let response: unknown
  try {
    response = await callAttemptFunction(input.route, {
      key: leasedKeyOf(lease),
      signal,
      attemptNumber: input.nextAttemptNumber(),
      route: input.routeName,
      request: { ...parts.request, stream: true },
      requestId: input.policy.correlationIds ? globalThis.crypto.randomUUID() : undefined,
      freshConnection: false,
    })
  } catch (error) {
    if (signal.aborted) return { kind: 'failed', verdict: undefined }
    return { kind: 'failed', verdict: classifyAttemptFailure({ kind: 'connection', error }) }
  }
  if (!(response instanceof Response)) {
    try {
      await settleWithin((response as { body?: ReadableStream | null } | null)?.body?.cancel?.())
    } catch {
      // A getter or a `cancel` that throws: nothing more to release.
    }
    return { kind: 'failed', verdict: undefined }
  }
  return response
}

/** How the attempt's answer ends: peeked to its first output, held while it repeats the text. */
async function readAnswer(
  input: AttemptsInput,
  parts: Parts,
  response: Response,
  started: number,
  attempt: AbortController,
): Promise<Tried> {
  const { policy, adapter } = input
  const { status } = response
  const source = frameSourceOf(response)
  if (status < 200 || status > 299 || source === null) {
    return failedAnswer(response, status, policy, attempt.signal)
  }
  let tracker: StreamTracker
  try {
    tracker = createStreamTracker(adapter)
  } catch {
    // The adapter's tracker limits are user code: the body is released all the same.
    await settleWithin(response.body?.cancel())
    return { kind: 'failed', verdict: undefined }
  }
  const reader = frameReaderOn(source, policy.maxFrameBytes)
  let peeked: PeekOutcome
  try {
    peeked = await peekOn(
      reader,
      adapter,
      { ...peekOptions(policy), clockStartedAt: started, tracker },
      attempt,
    )
  } catch {
    await reader.cancel().catch(() => {})
    return { kind: 'failed', verdict: undefined }
  }
  if (peeked.kind !== 'output') {
    await reader.cancel(peeked.kind === 'aborted' ? peeked.reason : undefined)
    if (peeked.kind === 'aborted') return { kind: 'failed', verdict: undefined }
    return { kind: 'failed', verdict: classifyAttemptFailure({ kind: 'peek', outcome: peeked }) }
  }
  return heldOutput(parts, peeked, tracker, policy, attempt.signal, response.headers)
}

/**
 * How an answer that is no stream failed (a status outside 2xx, or a body that is no event
 * stream), read from its bounded error body; a prefill refusal is its own end.
 */
async function failedAnswer(
  response: Response,
  status: number,
  policy: NormalizedRelayPolicy,
  signal: AbortSignal,
): Promise<Tried> {
  const text = await readBounded(response.body, policy.maxErrorBodyBytes, signal)
  const error = errorFromBody(text, status)
  if (isPrefillRefusal(status, error)) return { kind: 'refused' }
  const verdict = classifyAttemptFailure(
    status < 200 || status > 299
      ? { kind: 'status', status, headers: response.headers, error }
      : { kind: 'not-sse', status, contentType: response.headers.get('content-type'), error },
  )
  return { kind: 'failed', verdict }
}

/**
 * The attempt's output, once its answer is read on while it repeats the start of the received
 * text (held, not sent: see `continuation-restart.ts`); a restart when it began again.
 */
async function heldOutput(
  parts: Parts,
  peeked: Extract<PeekOutcome, { kind: 'output' }>,
  tracker: StreamTracker,
  policy: NormalizedRelayPolicy,
  signal: AbortSignal,
  headers: Headers,
): Promise<Tried> {
  let held: Held
  try {
    held = await holdRepeats(parts.received, peeked, tracker, holdBounds(policy), signal)
  } catch {
    await peeked.reader.cancel().catch(() => {})
    return { kind: 'failed', verdict: undefined }
  }
  if (held.kind === 'restarted') {
    await peeked.reader.cancel().catch(() => {})
    return { kind: 'restarted', usage: tracker.state.usage }
  }
  // The tracker saw every frame read so far; the pump shows it the rest.
  const seen = new Set(held.frames)
  const stream: ContinuedStream = {
    frames: held.frames,
    reader: peeked.reader,
    splice: parts.splice,
    observe: (frame) => {
      if (!seen.has(frame)) tracker.observe(frame)
    },
  }
  return { kind: 'output', stream, usage: () => tracker.state.usage, headers }
}
