/**
 * Issue 55, item 3, at the decisions: the backoff's exponent counts only the attempts that
 * reuse a key, never the moves to untried keys. A route's loop is replayed as `runRoute`
 * drives it (`nextRouteProgress` for what happened, `decideNext` for what follows, an
 * untried key first, a tried one after the decided pause), over pools of 1 to 1,000 keys and
 * any mix of bare 429s and 503s: the pause before the n-th reuse is the documented
 * `baseMs × factor^(n−1)` (500 ms, then 1 s at the defaults), whatever the sweep before it.
 * Before the fix every decided retry grew it, so a sweep over ten keys reached the 8 s cap.
 */

import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { classifyAttemptFailure } from '../../src/retry/decisions/classify.js'
import { decideNext } from '../../src/retry/decisions/decide.js'
import {
  initialRouteProgress,
  nextRouteProgress,
  type RouteProgress,
} from '../../src/retry/decisions/route-progress.js'
import { relayDefaults } from '../../src/retry/relay/policy.js'
import type { FailureVerdict } from '../../src/retry/shared/verdict.js'
import { runs } from '../support/runs.js'

const status = (code: number) =>
  classifyAttemptFailure({ kind: 'status', status: code, headers: new Headers() })
const bare429 = status(429)
const unavailable = status(503)

/** No jitter: each pause is exactly the backoff's middle. */
const backoff = { ...relayDefaults.backoff, jitter: 0 }
const documented = (n: number) =>
  Math.min(backoff.maxMs, backoff.baseMs * backoff.factor ** (n - 1))

/**
 * One request on one route of a pool of `size` keys, each attempt failing with the next of
 * `failures` (the last repeats): the pauses taken before each reuse of a tried key, and the
 * keys of the attempts, in order.
 */
function replay(size: number, failures: readonly FailureVerdict[], maxAttempts: number) {
  let progress: RouteProgress = initialRouteProgress(undefined)
  const keys: string[] = []
  const pauses: number[] = []
  let pause = 0
  let onlyUntried = false
  for (let n = 0; n < size + maxAttempts + 1; n++) {
    // The keys are tried in order: the next untried one is the count of those tried.
    const untried = progress.tried.size < size ? `k${progress.tried.size}` : undefined
    if (onlyUntried && untried === undefined) break
    const keyId = untried ?? `k${n % size}`
    if (untried === undefined) pauses.push(pause)
    keys.push(keyId)
    progress = nextRouteProgress(progress, { kind: 'started', keyId, as: 'attempt' })
    const verdict = failures[Math.min(n, failures.length - 1)] as FailureVerdict
    progress = nextRouteProgress(progress, { kind: 'failed', verdict })
    const decision = decideNext(
      {
        attempts: progress.attempts,
        maxAttempts,
        overloads: progress.overloads,
        capacityOverloads: progress.capacityOverloads,
        overloadFallbackAfter: 3,
        priority: 'interactive',
        hasNextRoute: false,
        fallbackAvailable: false,
        mode: 'stream',
        reuses: progress.reuses,
        pooled: true,
      },
      verdict,
      backoff,
      () => 0.5,
    )
    if (decision.kind !== 'retry') break
    onlyUntried = decision.onlyUntried !== undefined
    pause = decision.reuseDelayMs
    progress = nextRouteProgress(progress, {
      kind: 'retry',
      reuseAt: pause,
      reason: verdict.reason,
    })
  }
  return { keys, pauses }
}

describe('the backoff grows with the reuses of keys, never with the sweep over untried ones', () => {
  it.each([1, 4, 10, 1_000])(
    '%i keys, every one a bare 429: each key once, then two reuses after 500 ms and 1 s',
    (size) => {
      const { keys, pauses } = replay(size, [bare429], 3)
      expect(new Set(keys.slice(0, size)).size).toBe(size)
      expect(keys).toHaveLength(size + 2)
      expect(pauses).toEqual([500, 1_000])
    },
  )

  it('any pool size, any mix of bare 429s and 503s, any maxAttempts: the n-th reuse waits baseMs × factor^(n−1)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1_000 }),
        fc.array(fc.constantFrom(bare429, unavailable), { minLength: 1, maxLength: 40 }),
        fc.integer({ min: 1, max: 8 }),
        (size, failures, maxAttempts) => {
          const { pauses } = replay(size, failures, maxAttempts)
          expect(pauses).toEqual(pauses.map((_, i) => documented(i + 1)))
          // At most the attempts maxAttempts leaves after the first reuse a key.
          expect(pauses.length).toBeLessThanOrEqual(maxAttempts - 1)
        },
      ),
      { numRuns: runs(200) },
    )
  })
})
