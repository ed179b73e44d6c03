import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { KeyHeadroom, KeyStateSnapshot } from '../../src/advanced.js'
import type { KeyOutcome, KeySelection } from '../../src/index.js'
import type { PoolFactory } from './pool-contract.js'

const ids = ['a', 'b', 'c']
const keys = ids.map((id) => ({ id, secret: `sk-${id}-selection-0123456789` }))
const horizonMs = 3000
const halfLifeMs = 500

/** Whatever a header may say: absent, zero, small, huge, in the past, not a number. */
const said = fc.option(
  fc.oneof(
    fc.constant(0),
    fc.integer({ min: 1, max: 20 }),
    fc.constant(1e12),
    fc.integer({ min: -5000, max: -1 }),
    fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY),
  ),
  { nil: undefined },
)
const headroom: fc.Arbitrary<KeyHeadroom | undefined> = fc.option(
  fc.record({
    requestsRemaining: said,
    requestsResetMs: said,
    tokensRemaining: said,
    tokensResetMs: said,
  }),
  { nil: undefined },
)
const rateLimitOutcome = fc.record({
  kind: fc.constant('rate-limited' as const),
  retryAfterMs: said,
  headroom,
})
const successOutcome = fc.record({ kind: fc.constant('success' as const), headroom })

/** One request: its stated cost, what its key's upstream answered, and the clock's steps. */
const request = (outcome: fc.Arbitrary<KeyOutcome>) =>
  fc.record({
    tokens: fc.option(fc.integer({ min: 1, max: 2000 }), { nil: undefined }),
    outcome,
    latencyMs: fc.integer({ min: 0, max: 400 }),
    waitMs: fc.integer({ min: 0, max: 300 }),
  })

const healthy = (key: KeyStateSnapshot, now: number) =>
  !(key.disabled && (key.disabledUntil === 0 || (key.disabledUntil ?? 0) > now)) &&
  key.cooldownUntil <= now &&
  !(key.circuit === 'open' && key.circuitUntil > now)

/** Selection's invariants, for any KeyPool implementation, under every selection. */
export function describeSelectionProperties(name: string, make: PoolFactory, numRuns: number) {
  describe(`${name}: selection whatever the headers say`, () => {
    const selections: KeySelection[] = ['headroom', 'fastest', 'round-robin']

    it.each(selections)(
      '%s: whatever the headers say (absent, lying, zero, huge, in the past), no healthy key is starved forever',
      async (selection) => {
        await fc.assert(
          fc.asyncProperty(
            fc.array(request(fc.oneof(successOutcome, successOutcome, rateLimitOutcome)), {
              minLength: 400,
              maxLength: 400,
            }),
            async (requests) => {
              let clock = 10_000_000
              const pool = await make(keys, {
                selection,
                now: () => clock,
                headroomHorizonMs: horizonMs,
                latencyHalfLifeMs: halfLifeMs,
              })
              // Since when each key has been healthy and not leased (acquires, then ms).
              const since = ids.map(() => ({ acquires: 0, at: clock }))
              for (const step of requests) {
                const before = pool.toJSON().keys
                const result = await pool.acquire({ cost: { tokens: step.tokens } })
                if (result.kind !== 'leased') continue
                before.forEach((key, index) => {
                  const mark = since[index] as { acquires: number; at: number }
                  if (!healthy(key, clock) || key.id === result.lease.keyId) {
                    mark.acquires = 0
                    mark.at = clock
                    return
                  }
                  mark.acquires++
                  // Bounded in acquires or in time: a believed budget lasts at most the
                  // horizon, a latency at most four half-lives, a share at least 1 %.
                  const starved = mark.acquires > 300 && clock - mark.at > 2 * horizonMs
                  expect(starved, `${key.id} starved: ${JSON.stringify(mark)}`).toBe(false)
                })
                clock += step.latencyMs
                result.lease.commit()
                await result.lease.report(step.outcome)
                clock += step.waitMs
              }
            },
          ),
          { numRuns },
        )
      },
    )

    it.each(selections)(
      '%s: no cooling, open or held key is picked over a healthy one',
      async (selection) => {
        const anyOutcome = fc.oneof(
          successOutcome,
          rateLimitOutcome,
          fc.constantFrom<KeyOutcome>(
            { kind: 'server-error', status: 500 },
            { kind: 'auth-failed', status: 401 },
            { kind: 'protocol-fault' },
          ),
        )
        await fc.assert(
          fc.asyncProperty(
            fc.array(request(anyOutcome), { minLength: 60, maxLength: 60 }),
            async (requests) => {
              let clock = 10_000_000
              const pool = await make(keys, {
                selection,
                now: () => clock,
                failureThreshold: 2,
                breakerFailureRatio: 0.3,
                circuitOpenMs: 2000,
                authDisableMs: 3000,
                headroomHorizonMs: horizonMs,
                latencyHalfLifeMs: halfLifeMs,
              })
              for (const step of requests) {
                let usable = pool
                  .toJSON()
                  .keys.filter((key) => healthy(key, clock))
                  .map((key) => key.id)
                let result = await pool.acquire({ cost: { tokens: step.tokens } })
                for (
                  let waits = 0;
                  selection === 'headroom' && usable.length > 0 && result.kind === 'busy';
                  waits++
                ) {
                  // Every healthy key is predicted out: the answer says when the first refills
                  // or a cooling key is back (within the horizon), and soon a key is leased.
                  expect(waits).toBeLessThan(ids.length * 2)
                  expect(result.retryInMs).toBeGreaterThan(0)
                  expect(result.retryInMs).toBeLessThanOrEqual(horizonMs)
                  clock += result.retryInMs as number
                  usable = pool
                    .toJSON()
                    .keys.filter((key) => healthy(key, clock))
                    .map((key) => key.id)
                  result = await pool.acquire({ cost: { tokens: step.tokens } })
                }
                if (usable.length > 0) {
                  expect(result.kind).toBe('leased')
                }
                if (result.kind !== 'leased') {
                  clock += step.waitMs
                  continue
                }
                expect(usable).toContain(result.lease.keyId)
                clock += step.latencyMs
                result.lease.commit()
                await result.lease.report(step.outcome)
                clock += step.waitMs
              }
            },
          ),
          { numRuns },
        )
      },
    )
  })
}
