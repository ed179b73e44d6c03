/**
 * Guarantee 30 as a property: whatever valid policy a relay is built with (`createRelay`),
 * its requests, streaming or not, retried or not, normalise no option. Every options
 * normaliser counts itself in `normalizations` (src/options.ts).
 */

import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createHedging,
  createMemoryKeyPool,
  createRelay,
  fetchAttempt,
  openaiChat,
  type RelayPolicy,
} from '../../src/index.js'
import { normalizations } from '../../src/options.js'
import { chaosMarker } from '../../src/testing/chaos-marker.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { createRecordingSink } from '../../src/testing/index.js'
import { runs } from '../support/runs.js'

const total = () => Object.values(normalizations).reduce((sum, count) => sum + count, 0)

const scenarios = {
  ok: ['ok'],
  'rate-limited': ['rate-limited', 'ok'],
  empty: ['empty', 'ok'],
  cut: ['partial-then-cut', 'ok'],
  'streaming-unsupported': ['streaming-unsupported', 'ok'],
} as const

/** Valid policies: each option left out or set to a valid value. */
const policies: fc.Arbitrary<RelayPolicy> = fc.record(
  {
    maxAttempts: fc.integer({ min: 1, max: 4 }),
    deadlineMs: fc.constantFrom(5_000, 60_000, Number.POSITIVE_INFINITY),
    maxWaitMs: fc.integer({ min: 100, max: 10_000 }),
    backoff: fc.record(
      { baseMs: fc.integer({ min: 0, max: 2 }), maxMs: fc.integer({ min: 1, max: 5 }) },
      { requiredKeys: [] },
    ),
    peek: fc.record(
      {
        firstByteTimeoutMs: fc.integer({ min: 1_000, max: 10_000 }),
        firstOutputTimeoutMs: fc.constantFrom(5_000, Number.POSITIVE_INFINITY),
        maxPeekFrames: fc.integer({ min: 8, max: 512 }),
        commitOn: fc.constantFrom('visible' as const, 'content' as const, 'first-frame' as const),
      },
      { requiredKeys: [] },
    ),
    earlyHeaders: fc.boolean(),
    keepAliveIntervalMs: fc.constantFrom(1_000, Number.POSITIVE_INFINITY),
    downstream: fc.record({ keepAlive: fc.constantFrom(true, false, 'before-content' as const) }),
    maxFrameBytes: fc.integer({ min: 4_096, max: 1_048_576 }),
    maxErrorBodyBytes: fc.integer({ min: 256, max: 65_536 }),
    correlationIds: fc.boolean(),
    passThroughErrors: fc.boolean(),
    priority: fc.constantFrom('interactive' as const, 'background' as const),
    nonStreamingFallback: fc.oneof(fc.boolean(), fc.record({ timeoutMs: fc.constant(5_000) })),
    fitContextWindow: fc.boolean(),
    continueAfterCut: fc.oneof(fc.boolean(), fc.record({ maxContinuations: fc.constant(2) })),
    hedge: fc.constant(undefined),
    onPartialEof: fc.constantFrom('error' as const, 'synthesize-stop' as const),
    idleTimeoutMs: fc.constantFrom(10_000, Number.POSITIVE_INFINITY),
    stallThresholdMs: fc.integer({ min: 1, max: 5_000 }),
  },
  { requiredKeys: [] },
)

describe('a compiled relay normalises nothing per request', () => {
  it('for any valid policy, protocol and upstream behaviour, streaming or not: 0 normalisations per request of a relay built by createRelay', async () => {
    await fc.assert(
      fc.asyncProperty(
        policies,
        fc.boolean(),
        fc.boolean(),
        fc.constantFrom(...(Object.keys(scenarios) as (keyof typeof scenarios)[])),
        fc.boolean(),
        async (policy, anthropic, stream, scenario, hedged) => {
          const upstream = createFaultyUpstream({ scenarios })
          const adapter = anthropic ? anthropicMessages : openaiChat
          const chat = createRelay({
            pool: createMemoryKeyPool([
              { id: 'a', secret: 'sk-prop-checked-a-1234' },
              { id: 'b', secret: 'sk-prop-checked-b-1234' },
            ]),
            adapter,
            attempt: fetchAttempt({ fetch: upstream.fetch }),
            policy: {
              ...policy,
              ...(hedged ? { hedge: createHedging({ afterMs: 5, overloadPauseMs: 0 }) } : {}),
            },
          })
          for (let n = 0; n < 2; n++) {
            const content = chaosMarker({ scenario, requestId: `r${n}` })
            const sink = createRecordingSink()
            const before = total()
            const outcome = await chat({
              sink,
              request: {
                url: anthropic
                  ? 'http://upstream.test/v1/messages'
                  : 'http://upstream.test/v1/chat/completions',
                body: { model: 'm', max_tokens: 64, stream, messages: [{ role: 'user', content }] },
              },
            })
            expect(total() - before).toBe(0)
            expect(outcome.attempts.length).toBeGreaterThan(0)
          }
        },
      ),
      { numRuns: runs(30) },
    )
  }, 60_000)
})
