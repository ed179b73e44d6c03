import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { PeekOutcome } from '../../src/peek/index.js'
import {
  classifyAttemptFailure,
  peekTimeoutVerdict,
  wholeAnswerVerdict,
} from '../../src/retry/decisions/classify.js'
import {
  backoffDelay,
  deadlineVerdict,
  decideNext,
  type NotLeased,
  planKeyWait,
  type RouteState,
  reuseDelay,
} from '../../src/retry/decisions/decide.js'
import {
  busyVerdict,
  credentialsRejectedVerdict,
  rateLimitedVerdict,
} from '../../src/retry/decisions/pool-verdicts.js'
import { relayDefaults } from '../../src/retry/relay/policy.js'
import type { FailureVerdict } from '../../src/retry/shared/verdict.js'
import { runs } from '../support/runs.js'

const backoff = { ...relayDefaults.backoff, jitter: 0 }

const peek = (kind: 'empty' | 'read-error') =>
  ({ kind, frames: [], bytes: 0 }) as unknown as Exclude<PeekOutcome, { kind: 'output' }>
const errorFrame = (type: string) =>
  ({
    kind: 'error-frame',
    error: { type, message: type, code: null, status: null, retryable: true },
  }) as unknown as Exclude<PeekOutcome, { kind: 'output' }>
const status = (code: number) =>
  classifyAttemptFailure({ kind: 'status', status: code, headers: new Headers() })
const connection = (code: string) =>
  classifyAttemptFailure({ kind: 'connection', error: Object.assign(new Error(code), { code }) })

const verdict = (over: Partial<FailureVerdict> = {}): FailureVerdict => ({
  retryable: true,
  key: { kind: 'protocol-fault' },
  reason: 'empty',
  overload: false,
  status: 502,
  error: { type: 'upstream_error', message: 'empty' },
  ...over,
})

const state = (over: Partial<RouteState> = {}): RouteState => ({
  attempts: 1,
  maxAttempts: 3,
  overloads: 0,
  capacityOverloads: 0,
  overloadFallbackAfter: 3,
  priority: 'interactive',
  hasNextRoute: false,
  fallbackAvailable: false,
  mode: 'stream',
  reuses: 0,
  ...over,
})

const overload = verdict({
  key: { kind: 'overloaded' },
  reason: 'status-529',
  overload: true,
  status: 529,
})
const rejected = verdict({
  retryable: false,
  key: { kind: 'rejected' },
  reason: 'status-400',
  status: 400,
})

describe('decideNext: one row per verdict kind and state', () => {
  const rows: [string, RouteState, FailureVerdict, string][] = [
    ['a retryable failure with attempts left retries', state(), verdict(), 'retry'],
    ['attempts spent, nothing else: give up', state({ attempts: 3 }), verdict(), 'give-up'],
    [
      'attempts spent, a fallback available: fallback',
      state({ attempts: 3, fallbackAvailable: true }),
      verdict(),
      'fallback',
    ],
    [
      'attempts spent, another route: next route',
      state({ attempts: 3, hasNextRoute: true }),
      verdict(),
      'next-route',
    ],
    [
      'a rejected request gives up, even with another route',
      state({ hasNextRoute: true }),
      rejected,
      'give-up',
    ],
    ['the client left: client-gone', state({ stopped: 'client-gone' }), verdict(), 'client-gone'],
    [
      'a client-gone verdict: client-gone',
      state(),
      verdict({ retryable: false, key: { kind: 'client-gone' }, reason: 'client-gone' }),
      'client-gone',
    ],
    ['the deadline passed: give up', state({ stopped: 'deadline' }), verdict(), 'give-up'],
    [
      'overload on background priority: give up at once',
      state({ priority: 'background', hasNextRoute: true }),
      overload,
      'give-up',
    ],
    [
      'overload below the route budget: retry',
      state({ overloads: 2, hasNextRoute: true }),
      overload,
      'retry',
    ],
    [
      'overload at the route budget with another route: next route',
      state({ overloads: 3, hasNextRoute: true }),
      overload,
      'next-route',
    ],
    [
      'rate limits at the route budget, last route: retry (another key may have room)',
      state({ overloads: 3, capacityOverloads: 0 }),
      verdict({ key: { kind: 'rate-limited' }, reason: 'status-429', overload: true, status: 429 }),
      'retry',
    ],
    [
      'REPEATED_529: the provider at capacity 3 times in a row, last route: the request ends',
      state({ overloads: 3, capacityOverloads: 3, maxAttempts: 10 }),
      overload,
      'give-up',
    ],
    [
      'REPEATED_529 with another route: next route',
      state({ overloads: 3, capacityOverloads: 3, maxAttempts: 10, hasNextRoute: true }),
      overload,
      'next-route',
    ],
    [
      'REPEATED_529 even with a fallback available: the fallback asks the same provider, so the request ends',
      state({ overloads: 3, capacityOverloads: 3, attempts: 3, fallbackAvailable: true }),
      overload,
      'give-up',
    ],
    [
      'streaming unsupported with a fallback: fallback',
      state({ fallbackAvailable: true }),
      verdict({ retryable: false, reason: 'streaming-unsupported', key: { kind: 'rejected' } }),
      'fallback',
    ],
    [
      'streaming unsupported without a fallback: give up',
      state(),
      verdict({ retryable: false, reason: 'streaming-unsupported', key: { kind: 'rejected' } }),
      'give-up',
    ],
    [
      'a failed fallback with fallback attempts left: the fallback is retried',
      state({ mode: 'non-streaming' }),
      verdict(),
      'retry',
    ],
    [
      'a failed fallback, its attempts spent, last route: give up',
      state({ mode: 'non-streaming', attempts: 3 }),
      verdict(),
      'give-up',
    ],
    [
      'a failed fallback, its attempts spent, another route: next route (never a second fallback)',
      state({ mode: 'non-streaming', attempts: 3, hasNextRoute: true, fallbackAvailable: true }),
      verdict(),
      'next-route',
    ],
    [
      'a fallback refused for its request: give up',
      state({ mode: 'non-streaming' }),
      rejected,
      'give-up',
    ],
    [
      'a fallback overloaded after two overloaded streams: the count carries, the request ends',
      state({ mode: 'non-streaming', attempts: 1, capacityOverloads: 3 }),
      overload,
      'give-up',
    ],
    [
      'a non-retryable overload (x-should-retry: false) with another route: next route',
      state({ hasNextRoute: true }),
      { ...overload, retryable: false },
      'next-route',
    ],
  ]
  it.each(rows)('%s', (_name, routeState, failure, expected) => {
    expect(decideNext(routeState, failure, backoff).kind).toBe(expected)
  })

  it('a retry backs off exponentially from baseMs up to maxMs', () => {
    const delays = [0, 1, 2, 3, 4, 5].map((reuses) => {
      const decision = decideNext(state({ reuses }), verdict(), backoff)
      return decision.kind === 'retry' ? decision.reuseDelayMs : -1
    })
    expect(delays).toEqual([500, 1000, 2000, 4000, 8000, 8000])
  })
})

describe("one key's rate limit past maxAttempts", () => {
  const limited = status(429)

  it('over a pool: a retry on an untried key only, with what maxAttempts decides when none is left', () => {
    const at = { attempts: 3, maxAttempts: 3, pooled: true }
    expect(decideNext(state(at), limited, backoff)).toEqual({
      kind: 'retry',
      reuseDelayMs: 0,
      onlyUntried: { kind: 'give-up', verdict: limited },
    })
    expect(
      decideNext(state({ ...at, hasNextRoute: true, overloads: 1 }), limited, backoff),
    ).toEqual({ kind: 'retry', reuseDelayMs: 0, onlyUntried: { kind: 'next-route' } })
    expect(decideNext(state({ ...at, fallbackAvailable: true }), limited, backoff)).toEqual({
      kind: 'retry',
      reuseDelayMs: 0,
      onlyUntried: { kind: 'fallback' },
    })
  })

  it('without a pool, or after another failure, maxAttempts ends the route as before', () => {
    const at = { attempts: 3, maxAttempts: 3 }
    expect(decideNext(state(at), limited, backoff)).toEqual({ kind: 'give-up', verdict: limited })
    const failed = status(500)
    expect(decideNext(state({ ...at, pooled: true }), failed, backoff)).toEqual({
      kind: 'give-up',
      verdict: failed,
    })
  })
})

describe('recovery: how soon a retry follows, by what the fault says about load', () => {
  const classified: readonly [string, FailureVerdict, 'at-once' | 'backoff'][] = [
    ['empty stream', classifyAttemptFailure({ kind: 'peek', outcome: peek('empty') }), 'at-once'],
    [
      'cut before output',
      classifyAttemptFailure({ kind: 'peek', outcome: peek('read-error') }),
      'at-once',
    ],
    [
      'retryable error frame (api_error)',
      classifyAttemptFailure({ kind: 'peek', outcome: errorFrame('api_error') }),
      'at-once',
    ],
    ['reset before any response', connection('ECONNRESET'), 'at-once'],
    ['broken pipe', connection('EPIPE'), 'at-once'],
    ['empty whole answer', wholeAnswerVerdict('empty'), 'at-once'],
    ['429', status(429), 'backoff'],
    ['503', status(503), 'backoff'],
    ['529', status(529), 'backoff'],
    ['500', status(500), 'backoff'],
    [
      'overloaded error frame',
      classifyAttemptFailure({ kind: 'peek', outcome: errorFrame('overloaded_error') }),
      'backoff',
    ],
    [
      'rate-limit error frame',
      classifyAttemptFailure({ kind: 'peek', outcome: errorFrame('rate_limit_error') }),
      'backoff',
    ],
    ['refused connection', connection('ECONNREFUSED'), 'backoff'],
    ['first-output timeout', peekTimeoutVerdict('first-output-timeout', 100), 'backoff'],
  ]
  it.each(classified)('%s: %s', (_name, failure, recovery) => {
    expect(failure.recovery ?? 'backoff').toBe(recovery)
    const delays = [0, 0.5, 1].map((r) => {
      const decision = decideNext(state({ reuses: 0 }), failure, backoff, () => r)
      return decision.kind === 'retry' ? decision.reuseDelayMs : -1
    })
    for (const delay of delays) {
      if (recovery === 'at-once') expect(delay).toBeLessThanOrEqual(50)
      else expect(delay).toBe(500)
    }
  })

  it('a pause never exceeds the backoff the policy allows (baseMs: 0 means no pause)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2_000 }),
        fc.integer({ min: 0, max: 6 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.constantFrom('at-once' as const, 'backoff' as const, undefined),
        (baseMs, reuses, r, recovery) => {
          const options = { ...relayDefaults.backoff, baseMs }
          const failure = verdict({ recovery })
          const delay = reuseDelay(failure, options, reuses, () => r)
          const full = backoffDelay(options, reuses, () => r)
          expect(delay).toBeLessThanOrEqual(full)
          if (recovery === 'at-once') expect(delay).toBeLessThanOrEqual(50)
          else expect(delay).toBe(full)
        },
      ),
      { numRuns: runs(200) },
    )
  })
})

const routeStates = fc.record({
  attempts: fc.integer({ min: 1, max: 8 }),
  maxAttempts: fc.integer({ min: 1, max: 8 }),
  overloads: fc.integer({ min: 0, max: 5 }),
  capacityOverloads: fc.integer({ min: 0, max: 5 }),
  overloadFallbackAfter: fc.integer({ min: 1, max: 5 }),
  priority: fc.constantFrom('interactive' as const, 'background' as const),
  hasNextRoute: fc.boolean(),
  fallbackAvailable: fc.boolean(),
  mode: fc.constantFrom('stream' as const, 'whole' as const, 'non-streaming' as const),
  reuses: fc.integer({ min: 0, max: 10 }),
  stopped: fc.constantFrom(undefined, 'client-gone' as const, 'deadline' as const),
  pooled: fc.boolean(),
})

const verdicts = fc.record({
  retryable: fc.boolean(),
  key: fc.constantFrom(
    { kind: 'protocol-fault' as const },
    { kind: 'server-error' as const },
    { kind: 'rate-limited' as const },
    { kind: 'overloaded' as const },
    { kind: 'rejected' as const },
    { kind: 'auth-failed' as const },
  ),
  reason: fc.constantFrom('empty', 'status-500', 'status-429', 'streaming-unsupported'),
  overload: fc.boolean(),
  status: fc.constantFrom(400, 429, 500, 502, 504, 529),
  error: fc.constant({ type: 'upstream_error', message: 'x' }),
})

describe('decideNext properties', () => {
  it('never retries past maxAttempts, after the client left, after the deadline, or what the verdict says is not worth it', () => {
    fc.assert(
      fc.property(routeStates, verdicts, (routeState, failure) => {
        const decision = decideNext(routeState, failure, backoff)
        if (decision.kind === 'retry' && routeState.attempts >= routeState.maxAttempts) {
          // Past maxAttempts only one key's rate limit over a pool, only on an untried key,
          // and with what maxAttempts decides when there is none.
          expect(failure.key.kind).toBe('rate-limited')
          expect(routeState.pooled).toBe(true)
          const instead = decideNext({ ...routeState, pooled: false }, failure, backoff)
          expect(decision.onlyUntried).toEqual(instead)
        } else if (decision.kind === 'retry') {
          expect(decision.onlyUntried).toBeUndefined()
        }
        if (decision.kind === 'retry') {
          expect(routeState.stopped).toBeUndefined()
          expect(failure.retryable).toBe(true)
          // A provider at capacity too often in a row is never asked again.
          if (failure.key.kind === 'overloaded') {
            expect(routeState.capacityOverloads).toBeLessThan(routeState.overloadFallbackAfter)
          }
          expect(decision.reuseDelayMs).toBeLessThanOrEqual(backoff.maxMs)
        }
        if (routeState.stopped !== undefined) {
          expect(['give-up', 'client-gone']).toContain(decision.kind)
        }
        if (decision.kind === 'fallback') {
          expect(routeState.fallbackAvailable).toBe(true)
          expect(routeState.mode).not.toBe('non-streaming')
        }
        if (decision.kind === 'next-route') {
          expect(routeState.hasNextRoute).toBe(true)
          expect(routeState.priority).toBe('interactive')
        }
      }),
      { numRuns: runs(500) },
    )
  })

  it('background priority never retries or moves on after an overload', () => {
    fc.assert(
      fc.property(routeStates, verdicts, (routeState, failure) => {
        const decision = decideNext(
          { ...routeState, priority: 'background' },
          { ...failure, overload: true },
          backoff,
        )
        expect(['give-up', 'client-gone', 'fallback']).toContain(decision.kind)
      }),
      { numRuns: runs(300) },
    )
  })

  it('backoff delays stay within [base·factorⁿ·(1−jitter), maxMs·(1+jitter)]', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 40 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (reuses, r) => {
          const options = relayDefaults.backoff
          const delay = backoffDelay(options, reuses, () => r)
          const raw = Math.min(options.maxMs, options.baseMs * options.factor ** reuses)
          expect(delay).toBeGreaterThanOrEqual(Math.floor(raw * (1 - options.jitter)))
          expect(delay).toBeLessThanOrEqual(Math.ceil(raw * (1 + options.jitter)))
        },
      ),
      { numRuns: runs(300) },
    )
  })
})

const cooling = (retryInMs: number, rateLimited = true): NotLeased => ({
  kind: 'cooling',
  retryInMs,
  rateLimited,
})
const busy = (retryInMs?: number): NotLeased => ({ kind: 'busy', retryInMs })
const excluded: NotLeased = { kind: 'unavailable', reason: 'all-excluded' }

describe('planKeyWait: the key usable soonest, within the budget', () => {
  it('an untried key cooling 60 s and a tried key cooling 2 s: waits 2 s, not 60 s', () => {
    expect(
      planKeyWait({
        untried: cooling(60_000),
        all: cooling(2_000),
        budgetMs: 30_000,
        priority: 'interactive',
      }),
    ).toEqual({ kind: 'sleep', ms: 2_000 })
  })

  it('every key cooling on rate limits past the budget: 429 rate limited with retry-after', () => {
    const plan = planKeyWait({
      untried: cooling(60_000),
      budgetMs: 10_000,
      priority: 'interactive',
    })
    expect(plan).toEqual({ kind: 'give-up', verdict: rateLimitedVerdict(60_000) })
    expect(plan.kind === 'give-up' && plan.verdict.status).toBe(429)
  })

  it('keys cooling for another reason (open circuits) are never called rate limited', () => {
    const plan = planKeyWait({
      untried: cooling(60_000, false),
      budgetMs: 10_000,
      priority: 'interactive',
    })
    expect(plan.kind === 'give-up' && plan.verdict.reason).toBe('all-keys-cooling')
    expect(plan.kind === 'give-up' && plan.verdict.status).toBe(503)
  })

  it('a busy key is waited for (woken by a release), never called rate limited', () => {
    expect(planKeyWait({ untried: busy(), budgetMs: 5_000, priority: 'interactive' })).toEqual({
      kind: 'wait-release',
      ms: 5_000,
      includeTried: false,
    })
    const plan = planKeyWait({ untried: busy(), budgetMs: 0, priority: 'interactive' })
    expect(plan).toMatchObject({
      kind: 'give-up',
      verdict: { reason: 'all-keys-busy', status: 503 },
    })
  })

  it('busy tried keys are waited for too, and a cooldown ending sooner bounds the wait', () => {
    expect(
      planKeyWait({
        untried: excluded,
        all: busy(1_500),
        budgetMs: 5_000,
        priority: 'interactive',
      }),
    ).toEqual({ kind: 'wait-release', ms: 1_500, includeTried: true })
  })

  it('background priority does not wait out cooldowns', () => {
    const plan = planKeyWait({ untried: cooling(500), budgetMs: 10_000, priority: 'background' })
    expect(plan.kind).toBe('give-up')
  })

  it('every key disabled after auth failures: the credentials were rejected (ids, no secrets)', () => {
    const plan = planKeyWait({
      untried: { kind: 'unavailable', reason: 'all-disabled', rejectedKeyIds: ['a', 'b'] },
      budgetMs: 10_000,
      priority: 'interactive',
    })
    expect(plan).toEqual({ kind: 'give-up', verdict: credentialsRejectedVerdict(['a', 'b']) })
    expect(plan.kind === 'give-up' && plan.verdict.error.message).toContain('(a, b)')
  })

  it('past the budget after a failure: the failure the client should hear about', () => {
    const last = verdict({ reason: 'status-503', status: 503 })
    expect(
      planKeyWait({
        untried: excluded,
        all: cooling(9_000, false),
        budgetMs: 1_000,
        priority: 'interactive',
        last,
      }),
    ).toEqual({ kind: 'give-up', verdict: last })
  })

  it('never plans a wait longer than the budget', () => {
    const answer = fc.oneof(
      fc.integer({ min: 1, max: 100_000 }).map((ms) => cooling(ms)),
      fc.integer({ min: 1, max: 100_000 }).map((ms) => cooling(ms, false)),
      fc.option(fc.integer({ min: 1, max: 100_000 }), { nil: undefined }).map(busy),
      fc.constant(excluded),
    )
    fc.assert(
      fc.property(
        answer,
        fc.option(answer, { nil: undefined }),
        fc.integer({ min: -10, max: 60_000 }),
        (untried, all, budgetMs) => {
          const plan = planKeyWait({ untried, all, budgetMs, priority: 'interactive' })
          if (plan.kind !== 'give-up') {
            expect(plan.ms).toBeGreaterThan(0)
            expect(plan.ms).toBeLessThanOrEqual(budgetMs)
          }
          if (plan.kind === 'give-up' && plan.verdict.reason === 'all-keys-rate-limited') {
            for (const each of [untried, all]) {
              if (each !== undefined && each.kind !== 'unavailable') {
                expect(each.kind === 'cooling' && each.rateLimited).toBe(true)
              }
            }
          }
        },
      ),
      { numRuns: runs(500) },
    )
  })
})

describe('verdicts of the pool-level answers', () => {
  it('busy: 503 with a retry-after of at least 1 s; rate limited: 429; both retry later, neither blames a key', () => {
    expect(busyVerdict(undefined)).toMatchObject({
      status: 503,
      retryAfterMs: 1_000,
      key: { kind: 'cancelled' },
    })
    expect(rateLimitedVerdict(30_000)).toMatchObject({ status: 429, retryAfterMs: 30_000 })
  })

  it('the deadline keeps the previous failure unless it was a generic 502', () => {
    const limited = verdict({ status: 429, reason: 'status-429' })
    expect(deadlineVerdict(limited)).toMatchObject({
      status: 429,
      reason: 'status-429',
      retryable: false,
    })
    expect(deadlineVerdict(verdict())).toMatchObject({ status: 504, reason: 'deadline' })
    expect(deadlineVerdict(undefined)).toMatchObject({ status: 504, reason: 'deadline' })
  })
})
