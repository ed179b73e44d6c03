import fc from 'fast-check'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  createHedging,
  createMemoryKeyPool,
  openaiChat,
  type RelayOutcome,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import type { ScriptStep } from '../../src/testing/scripted-body.js'
import { finish, role, text } from '../support/chat-frames.js'
import { leaseTotals, withLatency } from '../support/leases.js'
import { runs } from '../support/runs.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

/**
 * Invariant 15: hedged attempts never mix. Over random per-attempt latencies, failures and
 * frame timings (fake timers), several requests in a row share one `Hedging`.
 */

type Kind =
  | 'ok'
  | 'cut-after-output'
  | 'hang'
  | 'preamble-hang'
  | 'empty'
  | 'status-500'
  | 'status-429'
  /** The attempt function ignores its signal and answers only after `firstAt`. */
  | 'late-headers'

interface AttemptScript {
  readonly kind: Kind
  /** Milliseconds before the first byte of the answer. */
  readonly firstAt: number
  /** Milliseconds between output frames. */
  readonly gaps: readonly number[]
}

/** The output frames of attempt `n`: each carries the attempt's number. */
function outputOf(n: number, script: AttemptScript): ScriptStep[] {
  const steps: ScriptStep[] = []
  script.gaps.forEach((gap, i) => {
    if (i > 0) steps.push({ wait: gap })
    steps.push({ bytes: text(`a${n}-${i} `) })
  })
  return steps
}

function behaviourOf(n: number, script: AttemptScript): Behaviour {
  const wait: ScriptStep = { wait: script.firstAt }
  switch (script.kind) {
    case 'late-headers':
      return { steps: [{ bytes: role }, ...outputOf(n, script), { bytes: finish }] }
    case 'ok':
      return { steps: [wait, { bytes: role }, ...outputOf(n, script), { bytes: finish }] }
    case 'cut-after-output':
      return {
        steps: [wait, { bytes: role }, ...outputOf(n, script), { error: new Error('cut') }],
      }
    case 'hang':
      return { steps: [{ hang: true }] }
    case 'preamble-hang':
      return { steps: [wait, { bytes: role }, { hang: true }] }
    case 'empty':
      return { steps: [wait, { bytes: role }] }
    case 'status-500':
      return { status: 500, steps: [wait, { bytes: '{"error":{"message":"boom"}}' }] }
    case 'status-429':
      return {
        status: 429,
        headers: { 'retry-after': '1' },
        steps: [wait, { bytes: '{"error":{"message":"slow down"}}' }],
      }
  }
}

const attemptScript: fc.Arbitrary<AttemptScript> = fc.record({
  kind: fc.constantFrom<Kind>(
    'ok',
    'ok',
    'ok',
    'cut-after-output',
    'hang',
    'preamble-hang',
    'empty',
    'status-500',
    'status-429',
    'late-headers',
  ),
  // On a 100 ms grid, like `afterMs`: first outputs of several attempts often coincide.
  firstAt: fc.integer({ min: 0, max: 25 }).map((n) => n * 100),
  gaps: fc.array(fc.integer({ min: 0, max: 300 }), { minLength: 1, maxLength: 4 }),
})

const requestScript = fc.record({
  background: fc.boolean(),
  earlyHeaders: fc.boolean(),
  attempts: fc.array(attemptScript, { minLength: 1, maxLength: 6 }),
})

/** The attempt numbers whose output markers appear in `body`. */
function markersIn(body: string): Set<number> {
  return new Set([...body.matchAll(/a(\d+)-\d+ /g)].map((m) => Number(m[1])))
}

afterEach(() => {
  vi.useRealTimers()
})

describe('hedged attempts (invariant 15)', () => {
  // What the runs exercised: a property that never hedged would prove nothing.
  const seen = { hedges: 0, wonByHedge: 0, lost: 0 }

  it(
    'hedged attempts never mix: the client gets one attempt, losers are cancelled and released once, in-flight stays within 1 + maxHedges, the budget holds, and no hedge runs for background or while overloaded',
    async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(requestScript, { minLength: 1, maxLength: 5 }),
          fc.record({
            keyCount: fc.integer({ min: 1, max: 4 }),
            maxHedges: fc.integer({ min: 1, max: 3 }),
            afterMs: fc.integer({ min: 1, max: 10 }).map((n) => n * 100),
            budget: fc.constantFrom(0.1, 0.5, 1),
            minHedgesPerWindow: fc.constantFrom(0, 0, 1, 10),
            maxAttempts: fc.integer({ min: 1, max: 3 }),
            overloadPauseMs: fc.constantFrom(0, 2_000, 30_000),
            // A shared store answers in its own time: attempts settle while the relay awaits it.
            poolLatencyMs: fc.constantFrom(0, 0, 50, 100),
          }),
          async (requests, setup) => {
            useFakeClock()
            const pool = createMemoryKeyPool(
              Array.from({ length: setup.keyCount }, (_, i) => ({
                id: `k${i}`,
                secret: `sk-${i}-abcdefgh`,
              })),
            )
            const slowPool = withLatency(pool, setup.poolLatencyMs)
            const hedging = createHedging({
              afterMs: setup.afterMs,
              maxHedges: setup.maxHedges,
              budget: setup.budget,
              minHedgesPerWindow: setup.minHedgesPerWindow,
              budgetWindowMs: 3_600_000,
              overloadPauseMs: setup.overloadPauseMs,
            })
            let counted = 0
            let hedges = 0
            let lastOverloadAt = Number.NEGATIVE_INFINITY
            for (const request of requests) {
              const interactive = !request.background
              if (interactive) counted++
              const scripts = new Map<number, AttemptScript>()
              let call = 0
              const upstream = scriptedUpstream((_, context) =>
                behaviourOf(
                  context.attemptNumber,
                  scripts.get(context.attemptNumber) as AttemptScript,
                ),
              )
              let maxInFlight = 0
              const attempt: typeof upstream.attempt = async (context) => {
                const script = request.attempts[
                  Math.min(call++, request.attempts.length - 1)
                ] as AttemptScript
                scripts.set(context.attemptNumber, script)
                if (script.kind === 'late-headers') {
                  await new Promise((resolve) => setTimeout(resolve, script.firstAt))
                }
                const response = await upstream.attempt(context)
                const inFlight = upstream.calls.filter(
                  (c) => c.body !== undefined && !c.body.released,
                )
                maxInFlight = Math.max(maxInFlight, inFlight.length)
                if (response.status === 429) lastOverloadAt = performance.now()
                return response
              }
              const hedgeStarts: number[] = []
              const startedAt = performance.now()
              let committedAt = Number.NaN
              const recording = createRecordingSink()
              const pending = relay({
                sink: recording,
                pool: slowPool,
                adapter: openaiChat,
                attempt,
                hooks: {
                  onCommit: () => {
                    committedAt = performance.now()
                  },
                  onHedge: () => {
                    hedges++
                    hedgeStarts.push(performance.now())
                    // The budget, at every hedge: hedges so far within the minimum allowance
                    // plus budget × requests so far.
                    expect(hedges).toBeLessThanOrEqual(
                      setup.minHedgesPerWindow + setup.budget * counted + 1e-9,
                    )
                    // Never while the route is paused after an overload seen earlier.
                    if (performance.now() > lastOverloadAt) {
                      expect(performance.now() - lastOverloadAt).toBeGreaterThanOrEqual(
                        setup.overloadPauseMs,
                      )
                    }
                  },
                },
                policy: {
                  hedge: hedging,
                  priority: request.background ? 'background' : 'interactive',
                  earlyHeaders: request.earlyHeaders,
                  maxAttempts: setup.maxAttempts,
                  keepAliveIntervalMs: Number.POSITIVE_INFINITY,
                  backoff: { baseMs: 100, maxMs: 400 },
                  maxWaitMs: 5_000,
                  peek: { firstByteTimeoutMs: 3_000, firstOutputTimeoutMs: 3_000 },
                  idleTimeoutMs: 2_000,
                },
              })
              let settled = false
              void pending.finally(() => {
                settled = true
              })
              // Time moves only as far as the request needs: the next request follows at once.
              for (let step = 0; !settled && step < 2_000; step++)
                await vi.advanceTimersByTimeAsync(50)
              const outcome: RelayOutcome = await pending
              const body = recording.text
              const shown = markersIn(body)
              const records = outcome.attempts
              // The client's bytes come from exactly one attempt: the committed one.
              if (outcome.kind === 'committed') {
                const winner = records.find((r) => r.result === 'committed')
                expect(winner).toBeDefined()
                expect([...shown]).toEqual([winner?.attemptNumber])
                const script = scripts.get(winner?.attemptNumber as number) as AttemptScript
                if (script.kind === 'ok') {
                  const expected = [
                    role,
                    ...outputOf(winner?.attemptNumber as number, script),
                    finish,
                  ]
                    .map((step) =>
                      typeof step === 'string' ? step : 'bytes' in step ? step.bytes : '',
                    )
                    .join('')
                  expect(body).toBe(expected)
                }
                // Every other attempt ended by the time the winner committed: cancelled at once.
                for (const record of records) {
                  // An attempt function that ignores its signal ends when it chooses to.
                  const late = scripts.get(record.attemptNumber)?.kind === 'late-headers'
                  if (record === winner || late) continue
                  expect(startedAt + record.startedMs + record.durationMs).toBeLessThanOrEqual(
                    committedAt,
                  )
                }
                if (outcome.hedges?.wonByHedge) seen.wonByHedge++
                seen.lost += records.filter((r) => r.result === 'hedge-lost').length
                if (outcome.hedges !== undefined) {
                  expect(outcome.hedges.cancelled).toBe(
                    records.filter((r) => r.result === 'hedge-lost').length,
                  )
                  expect(outcome.hedges.wonByHedge).toBe(winner?.hedgeOf !== undefined)
                }
              } else {
                expect(shown.size).toBe(0)
              }
              // Never more than 1 + maxHedges attempts in flight.
              expect(maxInFlight).toBeLessThanOrEqual(1 + setup.maxHedges)
              // No hedge on background priority.
              if (request.background) expect(hedgeStarts).toEqual([])
              // Every attempt's body is released, losers' included.
              expect(upstream.calls.every((c) => c.body === undefined || c.body.released)).toBe(
                true,
              )
              for (const record of records.filter((r) => r.result === 'hedge-lost')) {
                const lost = upstream.calls.find((c) => c.attemptNumber === record.attemptNumber)
                // An attempt function that ignores its signal may answer after the request
                // ended (the relay does not wait for it, invariant 29): its body is released then.
                const late = scripts.get(record.attemptNumber)?.kind === 'late-headers'
                if (lost === undefined && late) continue
                expect(lost?.signal.aborted || lost?.body?.cancelled || lost?.body?.finished).toBe(
                  true,
                )
              }
              // Hedges are extra: they never use the key they hedge.
              for (const record of records.filter((r) => r.hedgeOf !== undefined)) {
                const hedged = records.find((r) => r.attemptNumber === record.hedgeOf)
                expect(record.keyId).not.toBe(hedged?.keyId)
              }
            }
            // Every lease reported exactly once; nothing left in flight; losers reported cancelled.
            const { inflight, leased, reported } = await leaseTotals(pool)
            expect(inflight).toBe(0)
            expect(reported).toBe(leased)
            expect(hedges).toBeLessThanOrEqual(
              setup.minHedgesPerWindow + setup.budget * counted + 1e-9,
            )
            expect(hedging.snapshot().hedges).toBe(hedges)
            seen.hedges += hedges
            // A late attempt function's own wait (it ignored its signal) ends when it chooses.
            await vi.advanceTimersByTimeAsync(3_000)
            expect(vi.getTimerCount()).toBe(0)
            vi.useRealTimers()
          },
        ),
        { numRuns: runs(150) },
      )
      expect(seen.hedges).toBeGreaterThan(20)
      expect(seen.wonByHedge).toBeGreaterThan(5)
      expect(seen.lost).toBeGreaterThan(5)
      // Sized by the run count: `npm run test:deep` runs 25× as many.
    },
    runs(150) * 200,
  )
})
