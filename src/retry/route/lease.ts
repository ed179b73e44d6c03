/**
 * Getting the key for the next attempt: the key usable soonest, a tried key after its
 * backoff, or the caller's own credentials.
 *
 * @module
 */

import { now } from '../../call-safely.js'
import { UserCodeError } from '../../errors.js'
import type { KeyLease, KeyPool } from '../../key-pool/types.js'
import { deadlineVerdict, type NotLeased, planKeyWait } from '../decisions/decide.js'
import { estimateRequestCost } from '../request/request-cost.js'
import { sleep } from '../shared/sleep.js'
import type { FailureVerdict } from '../shared/verdict.js'
import type { RouteRun, Run } from './run.js'

/**
 * Leases the key usable soonest: a free untried key now; else a free tried key after its
 * backoff; else waits for the earliest cooling key's cooldown end or a busy key's release,
 * within the deadline and `maxWaitMs`. A give-up says why no key could be had.
 */
export async function leaseNext(
  run: Run,
  route: RouteRun,
): Promise<Leased | { kind: 'give-up'; verdict: FailureVerdict }> {
  const given = route.route.pool
  if (given === undefined) return callerCredentials(run, route)
  const pool = guardedPool(given)
  const waitStarted = now()
  for (;;) {
    const { tried } = route.progress
    const cost = estimateRequestCost(route.progress.request)
    const untried = await pool.acquire({ exclude: tried, cost })
    if (untried.kind === 'leased') return untried
    let all: NotLeased | undefined
    if (tried.size > 0) {
      const any = await pool.acquire({ cost })
      if (any.kind === 'leased') return backOff(run, route, any.lease)
      all = any
    }
    const plan = planKeyWait({
      untried,
      all,
      budgetMs: waitBudget(run, route, now() - waitStarted),
      priority: run.config.priority,
      last: run.last?.verdict,
    })
    if (plan.kind === 'give-up') return plan
    if (plan.kind === 'sleep') {
      const budgetMs = waitBudget(run, route, now() - waitStarted)
      await sleep(spreadWake(plan.ms, budgetMs), run.waits)
      continue
    }
    const woken = await pool.acquire({
      exclude: plan.includeTried ? undefined : tried,
      waitMs: plan.ms,
      signal: run.waits,
      cost,
    })
    if (woken.kind === 'leased') {
      return tried.has(woken.lease.keyId) ? backOff(run, route, woken.lease) : woken
    }
  }
}

/**
 * When a request waiting for a cooling key wakes: the cooldown's end plus up to a quarter of
 * it more (at most 1 s more, and never past `budgetMs`), drawn at random, so requests that
 * wait for the same key are not all sent the instant its cooldown ends, where the first few
 * would take the refilled budget and the rest meet the next 429 together.
 * @internal exported for tests
 */
export function spreadWake(ms: number, budgetMs: number, draw: () => number = Math.random): number {
  const room = Math.min(ms / 4, 1_000, Math.max(0, budgetMs - ms))
  return ms + room * draw()
}

export type Leased = { kind: 'leased'; lease: KeyLease | undefined }

/**
 * Leases a key the route has not tried and that is not cooling, for the free attempt after one
 * key's rate limit: a free one now, else a busy one's release within the wait budget; `null`
 * when there is none (every untried key cools, is disabled, or none is left).
 */
export async function leaseUntried(run: Run, route: RouteRun): Promise<Leased | null> {
  const given = route.route.pool
  if (given === undefined) return null
  const pool = guardedPool(given)
  const { tried, request } = route.progress
  const cost = estimateRequestCost(request)
  const untried = await pool.acquire({ exclude: tried, cost })
  if (untried.kind === 'leased') return untried
  const budgetMs = waitBudget(run, route, 0)
  if (untried.kind !== 'busy' || budgetMs <= 0) return null
  const woken = await pool.acquire({ exclude: tried, waitMs: budgetMs, signal: run.waits, cost })
  return woken.kind === 'leased' ? woken : null
}

/**
 * How much longer a route may wait for a key, `waited` milliseconds into the wait: the
 * deadline and `maxWaitMs` bound it, and a route with a next one waits no longer than its
 * longest backoff (`backoff.maxMs`): past that the next route answers sooner than this one
 * would (a 30 s `Retry-After`, or a 10 s default cooldown).
 */
function waitBudget(run: Run, route: RouteRun, waited: number): number {
  const budget = Math.min(run.deadlineAt - now(), run.config.maxWaitMs - waited)
  if (!route.hasNextRoute || run.config.priority === 'background') return budget
  return Math.min(budget, run.config.backoff.maxMs - waited)
}

/** A pool whose `acquire` failure names it (a wait the request ended rejects the same way). */
function guardedPool(pool: KeyPool): Pick<KeyPool, 'acquire'> {
  return {
    acquire: async (options) => {
      try {
        return await pool.acquire(options)
      } catch (error) {
        throw new UserCodeError('pool.acquire', error)
      }
    },
  }
}

/** Without a pool every attempt reuses the caller's credentials: after the backoff or `Retry-After`. */
async function callerCredentials(
  run: Run,
  route: RouteRun,
): Promise<Leased | { kind: 'give-up'; verdict: FailureVerdict }> {
  const wait = Math.max(0, route.progress.reuseAt - now())
  if (wait > waitBudget(run, route, 0)) {
    return { kind: 'give-up', verdict: deadlineVerdict(run.last?.verdict) }
  }
  await sleep(wait, run.waits)
  return { kind: 'leased', lease: undefined }
}

/** A tried key is reused only after its backoff; the lease ends unused if the request does. */
async function backOff(
  run: Run,
  route: RouteRun,
  lease: KeyLease,
): Promise<{ kind: 'leased'; lease: KeyLease } | { kind: 'give-up'; verdict: FailureVerdict }> {
  const wait = Math.max(0, route.progress.reuseAt - now())
  if (now() + wait > run.deadlineAt) {
    await lease.report({ kind: 'cancelled' })
    return { kind: 'give-up', verdict: deadlineVerdict(run.last?.verdict) }
  }
  try {
    await sleep(wait, run.waits)
  } catch (error) {
    await lease.report({ kind: 'cancelled' })
    throw error
  }
  return { kind: 'leased', lease }
}
