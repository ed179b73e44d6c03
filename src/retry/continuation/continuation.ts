/**
 * The relay's side of a continuation after a cut (guarantee 20 in docs/guarantees.md): whether one is sound, the
 * request the adapter builds, a key leased for it, its own pre-output attempts within its
 * budget, and each lease reported exactly once (guarantee 11 in docs/guarantees.md).
 *
 * @module
 */

import { now } from '../../call-safely.js'
import type { ContinuedStream, CutContext } from '../../commit/continuation.js'
import type { KeyLease, KeyOutcome } from '../../key-pool/types.js'
import type {
  ContinuationReceived,
  RenderState,
  StreamAdapter,
  TokenUsage,
  UpstreamRequest,
} from '../../protocols/types.js'
import { addUsage } from '../../protocols/usage.js'
import { keyOutcomeOf } from '../attempt/attempt.js'
import { withHeadroom } from '../decisions/headroom.js'
import type { Route } from '../shared/attempt-types.js'
import type { ContinuationRecord, RelayContinuation } from '../shared/continuation-types.js'
import type { ContinueAfterCutOptions, NormalizedRelayPolicy } from '../shared/policy-types.js'
import { attemptAll, type Parts, type Tried } from './continuation-attempts.js'
import { prefillRefused, refusalKey, rememberPrefillRefusal } from './prefill-refusals.js'

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

/** The record's word for a continuation that got no output to the client. */
const resultOf: Record<Exclude<Tried['kind'], 'output'>, ContinuationRecord['result']> = {
  failed: 'failed',
  restarted: 'restarted',
  refused: 'prefill-refused',
}

/** The fields every record of one cut shares. */
type RecordBase = Pick<ContinuationRecord, 'atMs' | 'cause' | 'receivedChars'>

/** How a continuation ended: its record, and the attempt with output and its lease if one had. */
type Ended =
  | { readonly record: ContinuationRecord; readonly output?: undefined }
  | {
      readonly record: ContinuationRecord
      readonly output: Extract<Tried, { kind: 'output' }>
      readonly lease: KeyLease | undefined
    }

/**
 * Sends the continuation to the first candidate route that can take it: one whose adapter
 * declines, or whose model refuses a prefill (now, or within the hour), passes it on; any
 * other end is told as it is (another route would meet the same). The refusals of the routes
 * passed over are told (`tell`) as they are left; the record of the end is returned.
 */
async function continueOn(
  input: ContinuationInput,
  base: RecordBase,
  received: ContinuationReceived,
  client: RenderState,
  signal: CutContext['signal'],
  tell: (record: ContinuationRecord) => void,
): Promise<Ended> {
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
      const record: ContinuationRecord = {
        ...base,
        keyId,
        result: 'spliced',
        attempts,
        continuedOn,
      }
      return { record, output: tried.tried, lease: tried.lease }
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
    const record: ContinuationRecord = {
      ...base,
      keyId,
      result: resultOf[kind],
      attempts,
      continuedOn,
      ...(usage === null ? {} : { usage }),
    }
    return { record }
  }
  return { record: refused ?? { ...base, keyId: null, result: 'not-sound', attempts: 0 } }
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
    const ended = await continueOn(input, base, received, snapshot(cut.state), cut.signal, tell)
    if (ended.output !== undefined) {
      const { usage, headers, stream } = ended.output
      current = { lease: ended.lease, usage, record: records.length, headers }
      continued.push(usage)
      tell(ended.record)
      return stream
    }
    return tell(ended.record)
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
