/**
 * Starting one attempt of a route on a leased key: its hooks, its record in the outcome,
 * and (with hedging) its place in a race.
 *
 * @module
 */

import { now } from '../../call-safely.js'
import type { KeyLease } from '../../key-pool/types.js'
import type { ResponseIdentity } from '../../protocols/identity.js'
import { redactText, redactValues } from '../../protocols/sanitize.js'
import type { TokenUsage, UpstreamRequest } from '../../protocols/types.js'
import { runAttempt } from '../attempt/attempt.js'
import { type ContinuationRoute, createRelayContinuation } from '../continuation/continuation.js'
import { canContinue } from '../continuation/continuation-policy.js'
import type { AttemptResult } from '../shared/attempt-io.js'
import type { AttemptMode } from '../shared/attempt-types.js'
import type { RelayContinuation } from '../shared/continuation-types.js'
import { callHook } from '../shared/hooks.js'
import type { AttemptRecord, AttemptResultName } from '../shared/outcome.js'
import type { FailureReason } from '../shared/verdict.js'
import { recordFirstOutput } from './hedge.js'
import { advance, type RouteRun, type Run } from './run.js'

/** The request to send for an attempt in `mode`. */
function requestFor(route: RouteRun, mode: AttemptMode) {
  const sent = route.progress.request
  if (sent === undefined) return undefined
  if (mode === 'stream') return { ...sent, stream: true }
  if (mode === 'whole') return { ...sent, stream: false }
  return { ...(route.route.adapter.nonStreamingRequest?.(sent) ?? sent), stream: false }
}

/** When the adapter's request hook throws: the lease still ends, once, then the attempt rejects. */
async function releaseAndThrow(lease: KeyLease | undefined, error: unknown): Promise<never> {
  await lease?.report({ kind: 'cancelled' }).catch(() => {})
  throw error
}

/**
 * Where a continuation of this route's attempt may be sent: the route itself when its adapter
 * can continue, then with `nextRoute` the later routes of the same protocol that can.
 */
function continuationRoutes(
  run: Run,
  route: RouteRun,
  request: UpstreamRequest,
  nextRoute: boolean,
): ContinuationRoute[] {
  const { adapter } = route.route
  const candidates: ContinuationRoute[] = canContinue(adapter)
    ? [{ route: route.route, name: route.name, adapter, request, own: true }]
    : []
  if (!nextRoute) return candidates
  const index = run.routes.indexOf(route.route)
  for (const [at, each] of run.routes.entries()) {
    const sent = each.request ?? run.request
    if (at <= index || sent === undefined) continue
    if (each.adapter.name !== adapter.name || !canContinue(each.adapter)) continue
    const name = each.name ?? `route-${at + 1}`
    const { url, body } = sent
    candidates.push({
      route: each,
      name,
      adapter: each.adapter,
      request: { url, body },
      own: false,
    })
  }
  return candidates
}

/**
 * The continuation of a streaming attempt, when `continueAfterCut` is on and the request is
 * known. Where neither its route's adapter nor (with `nextRoute`) a later route's of the same
 * protocol can continue, a cut is recorded `unsupported`: the policy may be shared by
 * endpoints of several protocols, so this is no option error.
 */
function continuationOf(
  run: Run,
  route: RouteRun,
  mode: AttemptMode,
  request: ReturnType<typeof requestFor>,
  keyId: string | null,
  attemptNumber: number,
): RelayContinuation | undefined {
  const config = run.config.continuation
  const { adapter } = route.route
  if (config === undefined || mode !== 'stream' || request === undefined) return undefined
  const { stream: _stream, ...sent } = request
  // Without any route able to continue, the cut is still recorded (`unsupported`).
  const candidates = continuationRoutes(run, route, sent, config.nextRoute)
  return createRelayContinuation({
    route: route.route,
    routeName: route.name,
    adapter,
    request: sent,
    candidates,
    policy: run.config,
    config,
    keyId,
    requestStarted: run.started,
    nextAttemptNumber: () => ++run.attemptNumber,
    addSecret: (secret) => {
      if (!run.secrets.includes(secret)) run.secrets.push(secret)
    },
    onRecord: (record) =>
      callHook(run.hooks.onContinuation, { ...record, attemptNumber, route: route.name }),
  })
}

/** An attempt's place in a hedged race. */
export interface RaceEntry {
  /** Aborts when another attempt won the client. */
  readonly lost: AbortSignal
  /** Asked at the first output: `false` when another attempt already won. */
  readonly claim: () => boolean
  /** The attempt this one hedges; `undefined` for the race's first attempt. */
  readonly hedgeOf: number | undefined
}

/** How a started attempt ended. */
export interface Started {
  readonly result: AttemptResult
  /** From the start of the request to this attempt's first output (0 without one). */
  readonly timeToFirstOutputMs: number
  /** This attempt's record's index in `run.attempts`. */
  readonly record: number
}

/** What an attempt's record says from its start. */
interface RecordBase {
  readonly attemptNumber: number
  readonly route: string
  readonly keyId: string | null
  readonly mode: 'stream' | 'non-streaming'
  readonly requestId: string | undefined
  readonly startedMs: number
  readonly hedgeOf: number | undefined
}

/**
 * An attempt's record: one literal, `hedgeOf` only on a hedge (a spread of the base into each
 * record cost more than the rest of the record keeping).
 */
function attemptRecord(
  base: RecordBase,
  status: number | null,
  result: AttemptResultName,
  retryable: boolean,
  durationMs: number,
  usage?: TokenUsage,
): AttemptRecord {
  const { attemptNumber, route, keyId, mode, requestId, startedMs, hedgeOf } = base
  const record: { -readonly [K in keyof AttemptRecord]: AttemptRecord[K] } = {
    attemptNumber,
    route,
    keyId,
    mode,
    requestId,
    startedMs,
    status,
    result,
    retryable,
    durationMs,
  }
  if (hedgeOf !== undefined) record.hedgeOf = hedgeOf
  if (usage !== undefined) record.usage = usage
  return record
}

/**
 * An answer's id and model as the outcome and spans carry them: an upstream may put the key
 * it was sent in either, so both are redacted by value and by shape.
 */
function redactIdentity(identity: ResponseIdentity, secrets: readonly string[]): ResponseIdentity {
  const { id, model } = identity
  return {
    ...(id === undefined ? {} : { id: redactText(id, secrets) }),
    ...(model === undefined ? {} : { model: redactText(model, secrets) }),
  }
}

/**
 * A failed attempt's words with every credential of the request redacted by value: its
 * reason, its error and the upstream's error body, before any of them is recorded, given to
 * a hook or written to the client; a committed attempt's answer id and model
 * ({@link redactIdentity}).
 */
function redactResult(result: AttemptResult, secrets: readonly string[]): AttemptResult {
  if (result.kind === 'committed') {
    const { response } = result
    return response === undefined
      ? result
      : { ...result, response: redactIdentity(response, secrets) }
  }
  if (secrets.length === 0) return result
  const { verdict, upstream } = result
  const error = verdict.error
  return {
    ...result,
    verdict: {
      ...verdict,
      reason: redactValues(verdict.reason, secrets) as FailureReason,
      error: {
        ...error,
        type: redactValues(error.type, secrets),
        message: redactValues(error.message, secrets),
        ...(typeof error.code === 'string' ? { code: redactValues(error.code, secrets) } : {}),
      },
    },
    upstream:
      upstream === undefined
        ? undefined
        : { ...upstream, body: redactValues(upstream.body, secrets) },
  }
}

/**
 * Runs one attempt on a leased key and records it. Not an async function: the attempt's own
 * promise is the only one it adds (each costs a host running async hooks); a throw of its
 * synchronous part rejects, as from an async function.
 */
export function startAttempt(
  run: Run,
  route: RouteRun,
  lease: KeyLease | undefined,
  mode: AttemptMode,
  race?: RaceEntry,
): Promise<Started> {
  try {
    const number = ++run.attemptNumber
    if (lease !== undefined && !run.secrets.includes(lease.secret)) run.secrets.push(lease.secret)
    let request: ReturnType<typeof requestFor>
    try {
      request = requestFor(route, mode)
    } catch (error) {
      return releaseAndThrow(lease, error)
    }
    const log = openRecord(run, route, lease, mode, number, race?.hedgeOf)
    return runLogged(run, route, log, { lease, mode, request, race })
  } catch (error) {
    return Promise.reject(error)
  }
}

/** A started attempt's record keeping: its place in `run.attempts` and its clock. */
interface AttemptLog {
  readonly number: number
  readonly keyId: string | null
  readonly requestId: string | undefined
  /** When the attempt started (`now()`). */
  readonly started: number
  /** The record's index in `run.attempts`, kept from the start. */
  readonly record: number
  readonly base: RecordBase
  /** The attempt's own time: up to the end of its upstream side, not the lease's report. */
  endedAt: number | undefined
  timeToFirstOutputMs: number
}

/**
 * Counts an attempt as started on its route, tells `onAttempt`, and keeps the record's place
 * from the start, so records stay in attempt order when hedged attempts end in another order.
 */
function openRecord(
  run: Run,
  route: RouteRun,
  lease: KeyLease | undefined,
  mode: AttemptMode,
  number: number,
  hedgeOf: number | undefined,
): AttemptLog {
  // Records name what went upstream: a whole request is a non-streaming one.
  const sentAs = mode === 'stream' ? 'stream' : 'non-streaming'
  const keyId = lease?.keyId ?? null
  // A hedge is extra: `maxAttempts` counts the attempts started as usual, and the fallback's
  // attempts on their own.
  advance(route, {
    kind: 'started',
    keyId,
    as: hedgeOf !== undefined ? 'hedge' : mode === 'non-streaming' ? 'fallback' : 'attempt',
  })
  const requestId = run.config.correlationIds ? globalThis.crypto.randomUUID() : undefined
  const started = now()
  callHook(run.hooks.onAttempt, {
    attemptNumber: number,
    route: route.name,
    keyId,
    mode: sentAs,
    requestId,
  })
  const record = run.attempts.length
  const base: RecordBase = {
    attemptNumber: number,
    route: route.name,
    keyId,
    mode: sentAs,
    requestId,
    startedMs: started - run.started,
    hedgeOf,
  }
  run.attempts.push(attemptRecord(base, null, 'running', false, 0))
  return {
    number,
    keyId,
    requestId,
    started,
    record,
    base,
    endedAt: undefined,
    timeToFirstOutputMs: 0,
  }
}

/** The attempt's own time so far, or up to the end of its upstream side. */
function durationOf(log: AttemptLog): number {
  return (log.endedAt ?? now()) - log.started
}

/** What an attempt is run with besides its run, route and record. */
interface AttemptStart {
  readonly lease: KeyLease | undefined
  readonly mode: AttemptMode
  readonly request: ReturnType<typeof requestFor>
  readonly race: RaceEntry | undefined
}

/** Runs the attempt and writes its record when it ends (one promise: the attempt's, chained once). */
function runLogged(
  run: Run,
  route: RouteRun,
  log: AttemptLog,
  start: AttemptStart,
): Promise<Started> {
  const { lease, mode, request, race } = start
  const freshConnection = run.freshConnection
  run.freshConnection = false
  return runAttempt({
    route: route.route,
    routeName: route.name,
    attemptNumber: log.number,
    mode,
    streamsOnEventStream: run.answerDecides,
    lease,
    request,
    requestId: log.requestId,
    freshConnection,
    gate: run.gate,
    policy: run.config,
    stop: run.stop,
    deadline: run.deadline,
    budgetMs: run.deadlineAt - now(),
    secrets: run.secrets,
    lost: race?.lost,
    claim: race?.claim,
    continuation: continuationOf(run, route, mode, request, log.keyId, log.number),
    onEnd: () => {
      log.endedAt = now()
    },
    onCommit: () => committed(run, route, log, mode),
  }).then(
    (answered) => {
      const result = redactResult(answered, run.secrets)
      run.attempts[log.record] = attemptRecord(
        log.base,
        result.status,
        result.kind === 'committed' ? 'committed' : result.verdict.reason,
        result.kind === 'failed' && result.verdict.retryable,
        durationOf(log),
        result.usage,
      )
      return { result, timeToFirstOutputMs: log.timeToFirstOutputMs, record: log.record }
    },
    (error: unknown) => {
      // A throw (a sink method, the gate): the record says the attempt was stopped, not running.
      const gone = run.stop.aborted || run.gate.failure !== undefined
      const name = gone ? 'client-gone' : 'threw'
      run.attempts[log.record] = attemptRecord(log.base, null, name, false, durationOf(log))
      throw error
    },
  )
}

/** The attempt's first output reached the client: its time, hedging's record and `onCommit`. */
function committed(run: Run, route: RouteRun, log: AttemptLog, mode: AttemptMode): void {
  const at = now()
  log.timeToFirstOutputMs = at - run.started
  if (run.config.hedge !== undefined && mode === 'stream') {
    recordFirstOutput(run.config.hedge, route.name, at - log.started)
  }
  callHook(run.hooks.onCommit, {
    attemptNumber: log.number,
    route: route.name,
    keyId: log.keyId,
    timeToFirstOutputMs: log.timeToFirstOutputMs,
  })
}
