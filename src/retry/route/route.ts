/**
 * One route of a relayed request: its attempts, what follows each failure (`decideNext`),
 * and the non-streaming fallback.
 *
 * @module
 */

import { now } from '../../call-safely.js'
import type { UpstreamRequest } from '../../protocols/types.js'
import { fitContextWindowOn } from '../decisions/context-window.js'
import { type Decision, deadlineVerdict, decideNext } from '../decisions/decide.js'
import type { AttemptResult } from '../shared/attempt-io.js'
import type { AttemptMode } from '../shared/attempt-types.js'
import { callHook } from '../shared/hooks.js'
import type { HedgeReport, HedgeSkipReason } from '../shared/outcome.js'
import type { BaseFailureReason, FailureVerdict } from '../shared/verdict.js'
import { leaseNext, leaseUntried } from './lease.js'
import { type RaceEnd, raceAttempts } from './race.js'
import { advance, noteFailure, type RouteEnd, type RouteRun, type Run } from './run.js'
import { startAttempt } from './start.js'

/** Lets `adjustRequest` or the context-window fit change a request the upstream refused. */
function adjustRefused(
  run: Run,
  route: RouteRun,
  verdict: FailureVerdict,
  status: number | null,
): FailureVerdict {
  const { request } = route.progress
  if (verdict.retryable || verdict.key.kind !== 'rejected' || request === undefined) return verdict
  let adjusted: UpstreamRequest | undefined
  try {
    const body = run.config.adjustRequest?.(
      Object.freeze({
        attemptNumber: run.attemptNumber,
        route: route.name,
        status,
        error: verdict.error,
        request,
      }),
    )
    if (body !== undefined) adjusted = { url: request.url, body }
  } catch {
    // A throwing hook keeps the refusal as it is.
  }
  const fit = adjusted === undefined && run.config.fit !== undefined && !route.progress.fitted
  if (fit && run.config.fit !== undefined) {
    adjusted = fitContextWindowOn(
      route.route.adapter,
      request,
      verdict.error.message,
      run.config.fit,
    )
  }
  advance(route, { kind: 'adjusted', request: adjusted, fitted: fit })
  if (adjusted === undefined) return verdict
  // A refusal is a fresh verdict from one attempt: never one already adjusted.
  const refused = verdict.reason as BaseFailureReason
  return { ...verdict, retryable: true, reason: `${refused}:request-adjusted` }
}

/** What follows a failed attempt on this route, with the route's state brought up to date. */
function afterFailure(
  run: Run,
  route: RouteRun,
  result: Extract<AttemptResult, { kind: 'failed' }>,
  mode: AttemptMode,
  index: number,
): Decision {
  let verdict =
    mode === 'non-streaming'
      ? result.verdict
      : adjustRefused(run, route, result.verdict, result.status)
  if (result.stopped === 'deadline') verdict = deadlineVerdict(run.last?.verdict)
  noteFailure(run, route, result, verdict)
  const decision = decideNext(
    {
      attempts:
        mode === 'non-streaming' ? route.progress.fallbackAttempts : route.progress.attempts,
      maxAttempts: run.config.maxAttempts,
      overloads: route.progress.overloads,
      capacityOverloads: route.progress.capacityOverloads,
      overloadFallbackAfter: run.config.overloadFallbackAfter,
      priority: run.config.priority,
      hasNextRoute: route.hasNextRoute,
      fallbackAvailable:
        mode === 'stream' &&
        !route.progress.fallbackUsed &&
        run.config.fallbackTimeoutMs !== undefined &&
        route.progress.request !== undefined &&
        route.route.adapter.nonStreamingRequest !== undefined &&
        route.route.adapter.renderFromMessage !== undefined,
      mode,
      reuses: route.progress.reuses,
      pooled: route.route.pool !== undefined,
      stopped: run.stop.aborted
        ? 'client-gone'
        : result.stopped === 'hedge-lost'
          ? undefined
          : (result.stopped ?? (run.deadline.aborted ? 'deadline' : undefined)),
    },
    run.deadline.aborted && result.stopped === undefined ? deadlineVerdict(verdict) : verdict,
    run.config.backoff,
  )
  // The record says what was decided: an adjusted request is a new reason, and a retry.
  const record = run.attempts[index]
  if (record !== undefined) {
    run.attempts[index] = {
      ...record,
      result: verdict.reason,
      retryable: decision.kind === 'retry' || decision.kind === 'fallback',
    }
  }
  if (decision.kind === 'retry') {
    // The caller's one credential waits out what the upstream asked for, too.
    const asked = route.route.pool === undefined ? (verdict.retryAfterMs ?? 0) : 0
    const reuseAt = now() + Math.max(decision.reuseDelayMs, asked)
    advance(route, { kind: 'retry', reuseAt, reason: verdict.reason })
  }
  return decision
}

/** What hedging did over the request's races so far: `next` added to `sum`. */
function addHedgeReports(sum: HedgeReport | undefined, next: HedgeReport): HedgeReport {
  if (sum === undefined) return next
  const skipped = { ...sum.skipped }
  for (const reason of Object.keys(skipped) as HedgeSkipReason[]) {
    skipped[reason] += next.skipped[reason]
  }
  return {
    started: sum.started + next.started,
    cancelled: sum.cancelled + next.cancelled,
    cancelledMs: sum.cancelledMs + next.cancelledMs,
    wonByHedge: next.wonByHedge,
    skipped,
  }
}

/** The route's attempts: stream attempts, then perhaps the non-streaming fallback. */
export async function runRoute(run: Run, route: RouteRun): Promise<RouteEnd> {
  const asked: AttemptMode = run.whole ? 'whole' : 'stream'
  let mode: AttemptMode = asked
  // After one key's rate limit past `maxAttempts`: an untried key, else this decision.
  let onlyUntried: Exclude<Decision, { kind: 'retry' }> | undefined
  for (;;) {
    if (run.stop.aborted) return { kind: 'client-gone' }
    const waitStarted = now()
    let leased: Awaited<ReturnType<typeof leaseNext>> | null
    try {
      leased =
        onlyUntried === undefined ? await leaseNext(run, route) : await leaseUntried(run, route)
    } catch (error) {
      // A wait ended by the client leaving or the deadline: nothing was leased.
      if (run.stop.aborted) return { kind: 'client-gone' }
      if (run.deadline.aborted)
        return { kind: 'give-up', verdict: deadlineVerdict(run.last?.verdict) }
      throw error
    }
    if (leased === null) {
      // No untried key for the rate limit's free pass: what `maxAttempts` decided instead.
      const instead = onlyUntried as Exclude<Decision, { kind: 'retry' }>
      onlyUntried = undefined
      if (instead.kind !== 'fallback') return instead
      advance(route, { kind: 'fallback', reason: route.progress.retryReason ?? 'rate-limited' })
      mode = 'non-streaming'
      continue
    }
    if (leased.kind === 'give-up') {
      // No key of this route within its wait: the next route is tried, as after any
      // exhausted route (the client hears the last route's answer).
      const canMoveOn =
        route.hasNextRoute && run.config.priority !== 'background' && !run.deadline.aborted
      return canMoveOn ? { kind: 'next-route' } : leased
    }
    const { retryReason } = route.progress
    if (retryReason !== undefined) {
      callHook(run.hooks.onRetry, {
        attemptNumber: run.attemptNumber + 1,
        reason: retryReason,
        delayMs: Math.round(now() - waitStarted),
        nextKeyId: leased.lease?.keyId ?? null,
        route: route.name,
      })
      advance(route, { kind: 'retry-told' })
    }
    const hedge = run.config.hedge
    const ended: RaceEnd | (Awaited<ReturnType<typeof startAttempt>> & { keyId: string | null }) =
      mode === 'stream' &&
      hedge !== undefined &&
      (leased.lease !== undefined || hedge.options.sameKey) &&
      run.config.priority !== 'background'
        ? await raceAttempts(run, route, leased.lease, hedge)
        : {
            ...(await startAttempt(run, route, leased.lease, mode)),
            keyId: leased.lease?.keyId ?? null,
          }
    const { result, timeToFirstOutputMs } = ended
    if ('hedges' in ended) run.hedges = addHedgeReports(run.hedges, ended.hedges)
    if (result.kind === 'committed') {
      return {
        kind: 'committed',
        outcome: {
          kind: 'committed',
          attempts: run.attempts,
          route: route.name,
          keyId: ended.keyId,
          mode: mode === 'stream' ? 'stream' : 'non-streaming',
          timeToFirstOutputMs,
          end: result.end,
          eof: result.eof,
          bytes: result.bytes,
          stalls: result.stalls,
          durationMs: now() - run.started,
          ...(run.hedges === undefined ? {} : { hedges: run.hedges }),
          ...((result.answerUsage ?? result.usage) === undefined
            ? {}
            : { usage: result.answerUsage ?? result.usage }),
          ...(result.response === undefined ? {} : { response: result.response }),
          ...(result.continuations === undefined ? {} : { continuations: result.continuations }),
        },
      }
    }
    const decision = afterFailure(run, route, result, mode, ended.record)
    switch (decision.kind) {
      case 'retry':
        // A failed fallback is retried as the fallback; anything else as the client asked.
        if (mode !== 'non-streaming') mode = asked
        onlyUntried = decision.onlyUntried
        break
      case 'fallback':
        advance(route, { kind: 'fallback', reason: result.verdict.reason })
        mode = 'non-streaming'
        break
      default:
        return decision
    }
  }
}
