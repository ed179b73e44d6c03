/**
 * Getting the key for the next attempt: the key usable soonest, a tried key after its
 * backoff, or the caller's own credentials.
 *
 * @module
 */

import { now } from '../../call-safely.js'
import { UserCodeError } from '../../errors.js'
import type { AcquireOptions, AcquireResult, KeyLease, KeyPool } from '../../key-pool/types.js'
import { deadlineVerdict, type NotLeased, planKeyWait } from '../decisions/decide.js'
import { estimateRequestCost } from '../request/request-cost.js'
import { sleep } from '../shared/sleep.js'
import type { FailureVerdict } from '../shared/verdict.js'
import type { RouteRun, Run } from './run.js'

type LeaseEnd = Leased | { kind: 'give-up'; verdict: FailureVerdict }

/**
 * Leases the key usable soonest: a free untried key now; else a free tried key after its
 * backoff; else waits for the earliest cooling key's cooldown end or a busy key's release,
 * within the deadline and `maxWaitMs`. A give-up says why no key could be had. Not an async
 * function: when the pool leases an untried key at once (most requests), the pool's answer
 * chained once is the only promise it adds; a throw rejects, as from an async function.
 */
export function leaseNext(run: Run, route: RouteRun): Promise<LeaseEnd> {
  try {
    const given = route.route.pool
    if (given === undefined) return callerCredentials(run, route)
    const waitStarted = now()
    const { tried, request } = route.progress
    const cost = estimateRequestCost(request)
    return acquireNamed(given, { exclude: tried, cost }, (untried) =>
      untried.kind === 'leased' ? untried : leaseAfterMiss(run, route, given, waitStarted, untried),
    )
  } catch (error) {
    return Promise.reject(error)
  }
}

/**
 * {@link leaseNext} once no untried key was free at once (`untried`): a tried key after its
 * backoff, else a wait for a key, then the pool asked again, until a key is leased or the
 * wait's budget is spent.
 */
async function leaseAfterMiss(
  run: Run,
  route: RouteRun,
  pool: KeyPool,
  waitStarted: number,
  missed: NotLeased,
): Promise<LeaseEnd> {
  let untried: AcquireResult = missed
  for (;;) {
    if (untried.kind === 'leased') return untried
    const { tried } = route.progress
    const cost = estimateRequestCost(route.progress.request)
    let all: NotLeased | undefined
    if (tried.size > 0) {
      const any = await acquireNamed(pool, { cost })
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
    } else {
      const woken = await acquireNamed(pool, {
        exclude: plan.includeTried ? undefined : tried,
        waitMs: plan.ms,
        signal: run.waits,
        cost,
      })
      if (woken.kind === 'leased') {
        return tried.has(woken.lease.keyId) ? backOff(run, route, woken.lease) : woken
      }
    }
    untried = await acquireNamed(pool, {
      exclude: route.progress.tried,
      cost: estimateRequestCost(route.progress.request),
    })
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
  const { tried, request } = route.progress
  const cost = estimateRequestCost(request)
  const untried = await acquireNamed(given, { exclude: tried, cost })
  if (untried.kind === 'leased') return untried
  const budgetMs = waitBudget(run, route, 0)
  if (untried.kind !== 'busy' || budgetMs <= 0) return null
  const woken = await acquireNamed(given, {
    exclude: tried,
    waitMs: budgetMs,
    signal: run.waits,
    cost,
  })
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

/**
 * The pool's `acquire`, its failure (a throw or a rejection; a wait the request ended rejects
 * the same way) named `pool.acquire`; `then` reads the answer in the same step (one promise).
 */
function acquireNamed<T = AcquireResult>(
  pool: KeyPool,
  options: AcquireOptions,
  then?: (answer: AcquireResult) => T | PromiseLike<T>,
): Promise<T> {
  const named = (error: unknown): never => {
    throw new UserCodeError('pool.acquire', error)
  }
  let answer: Promise<AcquireResult>
  try {
    answer = pool.acquire(options)
  } catch (error) {
    return Promise.reject(new UserCodeError('pool.acquire', error))
  }
  return Promise.resolve(answer).then(then, named) as Promise<T>
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
