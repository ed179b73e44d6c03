/**
 * The relay's side of a continuation after a cut (guarantee 20 in docs/guarantees.md): whether one is sound, the
 * request the adapter builds, a key leased for it, its own pre-output attempts within its
 * budget, and each lease reported exactly once (guarantee 11 in docs/guarantees.md).
 *
 * @module
 */

import { now, settleWithin } from '../../call-safely.js'
import { createStreamTracker, type StreamTracker } from '../../classify/index.js'
import type { ContinuedStream, CutContext } from '../../commit/continuation.js'
import { StreamTimeoutError } from '../../errors.js'
import { followSignals } from '../../follow-signals.js'
import type { KeyLease, KeyOutcome, KeyPool } from '../../key-pool/types.js'
import { peekDefaults, peekOn } from '../../peek/index.js'
import type {
  ContinuationReceived,
  ContinuationSplice,
  RenderState,
  StreamAdapter,
  TokenUsage,
  UpstreamRequest,
} from '../../protocols/types.js'
import { addUsage } from '../../protocols/usage.js'
import { frameReaderOn } from '../../sse/reader.js'
import { frameSourceOf } from '../../sse/sources.js'
import { keyOutcomeOf } from '../attempt/attempt.js'
import { callAttemptFunction, leasedKeyOf } from '../attempt/call-attempt.js'
import { classifyAttemptFailure } from '../decisions/classify.js'
import { type Held, type HoldBounds, holdRepeats } from '../decisions/continuation-restart.js'
import { errorFromBody, readBounded } from '../decisions/error-body.js'
import { withHeadroom } from '../decisions/headroom.js'
import { estimateRequestCost } from '../request/request-cost.js'
import type { Route } from '../shared/attempt-types.js'
import type { ContinuationRecord, RelayContinuation } from '../shared/continuation-types.js'
import type { ContinueAfterCutOptions, NormalizedRelayPolicy } from '../shared/policy-types.js'
import type { FailureVerdict } from '../shared/verdict.js'
import {
  isPrefillRefusal,
  prefillRefused,
  refusalKey,
  rememberPrefillRefusal,
} from './prefill-refusals.js'

/** What the relay gives a continuation of one committed attempt. */
export interface ContinuationInput {
  readonly route: Route
  readonly routeName: string
  readonly adapter: StreamAdapter
  /** The request of the cut attempt. */
  readonly request: UpstreamRequest
  readonly policy: NormalizedRelayPolicy
  readonly config: Required<ContinueAfterCutOptions>
  /** The key of the cut attempt (tried elsewhere first). */
  readonly keyId: string | null
  readonly requestStarted: number
  /** The next attempt number of the request. */
  nextAttemptNumber(): number
  /** A leased key's secret, redacted by value from everything that leaves the relay. */
  addSecret(secret: string): void
  /** Called once per continuation, when its record is final or its output began. */
  onRecord(record: ContinuationRecord): void
  /**
   * Where a continuation may be sent, in order: the cut's own route when its adapter can
   * continue, then (with `nextRoute`) later routes of the same protocol that can. A later one
   * is asked only when the ones before could not continue (declined, or refused a prefill).
   */
  readonly candidates: readonly ContinuationRoute[]
}

/** A route a continuation may be sent on. */
export interface ContinuationRoute {
  readonly route: Route
  readonly name: string
  readonly adapter: StreamAdapter
  /** The request that route sends (the cut attempt's, on the cut's own route). */
  readonly request: UpstreamRequest
  /** The cut's own route (its key is tried elsewhere first). */
  readonly own: boolean
}

/** The model a request names, if its body does. */
function modelOf(request: UpstreamRequest): string | undefined {
  const { model } = request.body
  return typeof model === 'string' ? model : undefined
}

/** The continuation's input on `candidate`: its route, adapter and request. */
function inputOn(input: ContinuationInput, candidate: ContinuationRoute): ContinuationInput {
  if (candidate.own) return input
  const { route, name, adapter, request } = candidate
  return { ...input, route, routeName: name, adapter, request, keyId: null }
}

/** Why the client's answer cannot be continued, or the text to continue; `undefined` when sound. */
function receivedText(state: RenderState, limit: number): string | undefined {
  const { text, tool, reasoning, refusal } = state.counts
  if (text === 0 || tool > 0 || reasoning > 0 || refusal > 0) return undefined
  if (state.visibleText.length > limit) return undefined
  return state.visibleText
}

function isRequest(value: unknown): value is UpstreamRequest {
  if (typeof value !== 'object' || value === null) return false
  const { url, body } = value as { url?: unknown; body?: unknown }
  return (
    (url === undefined || typeof url === 'string') &&
    typeof body === 'object' &&
    body !== null &&
    !Array.isArray(body)
  )
}

/** A continuation's request, its splice, and the text it continues. */
interface Parts {
  readonly request: UpstreamRequest
  readonly splice: ContinuationSplice
  readonly received: string
}

/** The adapter's continuation request and splice, or `undefined` when it declines or misbehaves. */
function adapterParts(
  adapter: StreamAdapter,
  request: UpstreamRequest,
  received: ContinuationReceived,
  client: RenderState,
): Parts | undefined {
  try {
    const built = adapter.buildContinuation?.(request, received)
    if (!isRequest(built)) return undefined
    const splice = adapter.spliceContinuation?.(received, client)
    if (typeof splice !== 'function') return undefined
    return { request: built, splice, received: received.text }
  } catch {
    return undefined
  }
}

/** A snapshot of the client's state the splice may read after the stream moved on. */
function snapshot(state: RenderState): RenderState {
  return {
    ...state,
    openBlocks: [...state.openBlocks],
    counts: { ...state.counts },
  }
}

type Tried =
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

/** The record's word for a continuation that got no output to the client. */
const resultOf: Record<Exclude<Tried['kind'], 'output'>, ContinuationRecord['result']> = {
  failed: 'failed',
  restarted: 'restarted',
  refused: 'prefill-refused',
}

/** Creates the continuation of one committed attempt. */
export function createRelayContinuation(input: ContinuationInput): RelayContinuation {
  const records: ContinuationRecord[] = []
  /** The running continuation's lease and its own tracker's usage. */
  let current:
    | {
        lease: KeyLease | undefined
        usage: () => TokenUsage | null
        record: number
        headers: Headers
      }
    | undefined
  let usageAtCut: TokenUsage | undefined
  let cutSeen = false
  /** Cuts met so far: each may be continued once, up to `maxContinuations`. */
  let cuts = 0
  const continued: (() => TokenUsage | null)[] = []

  async function settle(outcome: KeyOutcome): Promise<void> {
    const running = current
    current = undefined
    if (running === undefined) return
    // The record learns the continuation's usage once its stream is over.
    const usage = running.usage()
    const record = records[running.record]
    if (usage !== null && record !== undefined) records[running.record] = { ...record, usage }
    await running.lease?.report(withHeadroom(outcome, running.headers)).catch(() => {})
  }

  /** Keeps a continuation's record and tells the hook (its result is final, or its output began). */
  function tell(record: ContinuationRecord): null {
    records.push(record)
    input.onRecord(record)
    return null
  }

  async function next(cut: CutContext): Promise<ContinuedStream | null> {
    // The previous continuation reached the upstream's end (a cut): its key works.
    await settle({ kind: 'success' })
    if (!cutSeen) {
      cutSeen = true
      usageAtCut = cut.state.usage ?? undefined
    }
    const atMs = now() - input.requestStarted
    const text = receivedText(cut.state, input.config.maxReceivedChars)
    const received = text === undefined ? undefined : Object.freeze({ text })
    const base = { atMs, cause: cut.cause, receivedChars: cut.state.visibleText.length }
    // No route of this protocol can continue at all: named as such, not `not-sound`.
    if (input.candidates.length === 0)
      return tell({ ...base, keyId: null, result: 'unsupported', attempts: 0 })
    // Out of continuations is a budget spent, not a fault of the stream: its own word.
    if (cuts++ >= input.config.maxContinuations) {
      return tell({ ...base, keyId: null, result: 'exhausted', attempts: 0 })
    }
    if (received === undefined) {
      return tell({ ...base, keyId: null, result: 'not-sound', attempts: 0 })
    }
    return continueOn(base, received, snapshot(cut.state), cut.signal)
  }

  /**
   * Sends the continuation to the first candidate route that can take it: one whose adapter
   * declines, or whose model refuses a prefill (now, or within the hour), passes it on; any
   * other end is told as it is (another route would meet the same).
   */
  async function continueOn(
    base: Pick<ContinuationRecord, 'atMs' | 'cause' | 'receivedChars'>,
    received: ContinuationReceived,
    client: RenderState,
    signal: CutContext['signal'],
  ): Promise<ContinuedStream | null> {
    // A refusal is told as its own record once another route is tried (or at the end); a
    // route skipped without a request (a model known to refuse) leaves the refusal as it is.
    let refused: ContinuationRecord | undefined
    const refusedModels = new Set<string | undefined>()
    for (const candidate of input.candidates) {
      const parts = adapterParts(candidate.adapter, candidate.request, received, client)
      if (parts === undefined) continue
      const continuedOn = { route: candidate.name, model: modelOf(parts.request) }
      const refusal = refusalKey(candidate.name, parts.request)
      if (prefillRefused(refusal) || refusedModels.has(continuedOn.model)) {
        refused ??= { ...base, keyId: null, result: 'prefill-refused', attempts: 0, continuedOn }
        continue
      }
      if (refused !== undefined) tell(refused)
      refused = undefined
      const tried = await attemptAll(inputOn(input, candidate), parts, signal)
      const { keyId, attempts } = tried
      if (tried.tried.kind === 'output') {
        current = {
          lease: tried.lease,
          usage: tried.tried.usage,
          record: records.length,
          headers: tried.tried.headers,
        }
        continued.push(current.usage)
        tell({ ...base, keyId, result: 'spliced', attempts, continuedOn })
        return tried.tried.stream
      }
      const { kind } = tried.tried
      if (kind === 'refused') {
        // The key worked: the model refuses the request's shape. Not asked again for a while.
        rememberPrefillRefusal(refusal)
        if (continuedOn.model !== undefined) refusedModels.add(continuedOn.model)
        refused = { ...base, keyId, result: 'prefill-refused', attempts, continuedOn }
        continue
      }
      const usage = kind === 'restarted' ? tried.tried.usage : null
      return tell({
        ...base,
        keyId,
        result: resultOf[kind],
        attempts,
        continuedOn,
        ...(usage === null ? {} : { usage }),
      })
    }
    return tell(refused ?? { ...base, keyId: null, result: 'not-sound', attempts: 0 })
  }

  return {
    next,
    records,
    async close(end) {
      await settle(end === undefined ? { kind: 'cancelled' } : keyOutcomeOf(end))
    },
    attemptUsage(tracked) {
      return cutSeen ? usageAtCut : tracked
    },
    usage(tracked) {
      if (!cutSeen) return tracked
      let sum = usageAtCut
      for (const each of continued) sum = addUsage(sum, each() ?? undefined)
      return sum
    },
  }
}

/** A continuation's attempts: the last one's end, and the lease of one with output. */
interface Attempted {
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
async function attemptAll(
  input: ContinuationInput,
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
  input: ContinuationInput,
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
  input: ContinuationInput,
  parts: Parts,
  lease: KeyLease | undefined,
  budget: AbortController,
): Promise<Tried> {
  const { policy, adapter } = input
  const attempt = followSignals([budget.signal])
  const signal = attempt.controller.signal
  try {
    const started = now()
    let response: unknown
    try {
      response = await callAttemptFunction(input.route, {
        key: leasedKeyOf(lease),
        signal,
        attemptNumber: input.nextAttemptNumber(),
        route: input.routeName,
        request: { ...parts.request, stream: true },
        requestId: policy.correlationIds ? globalThis.crypto.randomUUID() : undefined,
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
    const { status } = response
    const source = frameSourceOf(response)
    if (status < 200 || status > 299 || source === null) {
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
    let tracker: StreamTracker
    try {
      tracker = createStreamTracker(adapter)
    } catch {
      // The adapter's tracker limits are user code: the body is released all the same.
      await settleWithin(response.body?.cancel())
      return { kind: 'failed', verdict: undefined }
    }
    const reader = frameReaderOn(source, policy.maxFrameBytes)
    let peeked: Awaited<ReturnType<typeof peekOn>>
    try {
      peeked = await peekOn(
        reader,
        adapter,
        { ...peekOptions(policy), clockStartedAt: started, tracker },
        attempt.controller,
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
    return {
      kind: 'output',
      stream,
      usage: () => tracker.state.usage,
      headers: response.headers,
    }
  } finally {
    attempt.release()
  }
}
