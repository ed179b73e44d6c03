import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { normalizeGateOptions } from '../../src/commit/gate-options.js'
import { normalizePumpPolicy } from '../../src/commit/pump-policy.js'
import {
  createHedging,
  createMemoryKeyPool,
  openaiChat,
  type RelayPolicy,
  relay,
} from '../../src/index.js'
import { normalizePeekOptions } from '../../src/peek/index.js'
import { settingsOf } from '../../src/redis/settings.js'
import { normalizeRelayPolicy } from '../../src/retry/relay/policy.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { runs } from '../support/runs.js'

/**
 * Every duration option, by the path a user writes it at, and what the docs promise of it:
 * `positive` (above 0), `zero` (0 or more), `timeout` (above 0, or `Infinity` for "off").
 * Each is at most `setTimeout`'s limit, 2 147 483 647 ms; anything else is a `RangeError`
 * naming the option (a longer delay would fire at once: a deadline that cuts every request).
 */
type Rule = 'positive' | 'zero' | 'timeout'

const keys = [{ id: 'a', secret: 'sk-a-0123456789' }]
const fakeRedis = { defineCommand() {} }
const policy = (value: RelayPolicy) => () => normalizeRelayPolicy(value)
const pool = (name: string) => (ms: number) => () => createMemoryKeyPool(keys, { [name]: ms })
const redis = (name: string) => (ms: number) => () =>
  settingsOf(keys, { redis: fakeRedis as never, prefix: 'p', [name]: ms })

type Row = readonly [path: string, rule: Rule, apply: (ms: number) => () => unknown]

const options: readonly Row[] = [
  ['deadlineMs', 'timeout', (ms) => policy({ deadlineMs: ms })],
  ['maxWaitMs', 'positive', (ms) => policy({ maxWaitMs: ms })],
  ['backoff.baseMs', 'zero', (ms) => policy({ backoff: { baseMs: ms, maxMs: 2 ** 31 - 1 } })],
  ['backoff.maxMs', 'positive', (ms) => policy({ backoff: { maxMs: ms } })],
  [
    'keepAliveIntervalMs',
    'timeout',
    (ms) => () => normalizeGateOptions({ keepAliveIntervalMs: ms }),
  ],
  [
    'writeStallTimeoutMs',
    'timeout',
    (ms) => () => normalizePumpPolicy({ writeStallTimeoutMs: ms }),
  ],
  ['idleTimeoutMs', 'timeout', (ms) => policy({ idleTimeoutMs: ms })],
  ['stallThresholdMs', 'positive', (ms) => policy({ stallThresholdMs: ms })],
  ['firstByteTimeoutMs', 'timeout', (ms) => () => normalizePeekOptions({ firstByteTimeoutMs: ms })],
  ['firstOutputTimeoutMs', 'timeout', (ms) => policy({ peek: { firstOutputTimeoutMs: ms } })],
  ['silenceTimeoutMs', 'timeout', (ms) => policy({ peek: { silenceTimeoutMs: ms } })],
  [
    'nonStreamingFallback.timeoutMs',
    'positive',
    (ms) => policy({ nonStreamingFallback: { timeoutMs: ms } }),
  ],
  [
    'continueAfterCut.timeoutMs',
    'timeout',
    (ms) => policy({ continueAfterCut: { timeoutMs: ms } }),
  ],
  ['hedge.afterMs', 'positive', (ms) => () => createHedging({ afterMs: ms })],
  ['hedge.budgetWindowMs', 'positive', (ms) => () => createHedging({ budgetWindowMs: ms })],
  ['hedge.overloadPauseMs', 'zero', (ms) => () => createHedging({ overloadPauseMs: ms })],
  [
    'hedge.adaptive.initialMs',
    'positive',
    (ms) => () => createHedging({ adaptive: { initialMs: ms, minMs: 1 } }),
  ],
  ['hedge.adaptive.minMs', 'positive', (ms) => () => createHedging({ adaptive: { minMs: ms } })],
  ...(
    [
      'defaultCooldownMs',
      'minCooldownMs',
      'maxCooldownMs',
      'headroomHorizonMs',
      'latencyHalfLifeMs',
      'breakerWindowMs',
      'circuitOpenMs',
      'authDisableMs',
    ] as const
  ).map((name): Row => [name, 'positive', pool(name)]),
  ...(['leaseTtlMs', 'commandTimeoutMs', 'probeIntervalMs'] as const).map(
    (name): Row => [`redis ${name}`, 'positive', redis(name)],
  ),
]

const limit = 2_147_483_647

function allowed(rule: Rule, ms: number): boolean {
  if (rule === 'timeout' && ms === Number.POSITIVE_INFINITY) return true
  return (rule === 'zero' ? ms >= 0 : ms > 0) && ms <= limit
}

const edges = [
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  -1,
  -0,
  0,
  0.5,
  1,
  limit,
  limit + 0.5,
  2 ** 31,
  2 ** 32,
  Number.MAX_SAFE_INTEGER,
  Number.MAX_VALUE,
]
const anyNumber = fc.oneof(
  fc.constantFrom(...edges),
  fc.double(),
  fc.integer({ min: -1, max: 2 ** 33 }),
)

describe('duration options', () => {
  it.each(options)(
    'every duration option either works as documented or is a RangeError, over the whole range of numbers: %s',
    (path, rule, apply) => {
      const name = path.replace(/^redis /, '').replace(/^.*\.(?=[a-zA-Z]+Ms$)/, '')
      fc.assert(
        fc.property(anyNumber, (ms) => {
          const run = apply(ms)
          if (allowed(rule, ms)) {
            expect(run).not.toThrow()
            return
          }
          let thrown: unknown
          try {
            run()
          } catch (error) {
            thrown = error
          }
          expect(thrown).toBeInstanceOf(RangeError)
          expect((thrown as Error).message).toContain(name)
          expect((thrown as Error).message).toContain(String(ms))
        }),
        { numRuns: runs(40), examples: edges.map((ms) => [ms]) },
      )
    },
  )

  it("a pool's wait for a busy key past the timer limit (Infinity, 2^31) waits for the release, not at once", async () => {
    for (const waitMs of [2 ** 31, Number.POSITIVE_INFINITY]) {
      const pool = createMemoryKeyPool(keys, { maxInflight: 1 })
      const first = await pool.acquire()
      expect(first.kind).toBe('leased')
      const second = pool.acquire({ waitMs })
      const early = await Promise.race([
        second.then((result) => result.kind),
        new Promise((resolve) => setTimeout(() => resolve('still waiting'), 30)),
      ])
      expect(early).toBe('still waiting')
      if (first.kind === 'leased') await first.lease.report({ kind: 'success' })
      expect((await second).kind).toBe('leased')
    }
  })

  it('a deadline and a hedge delay at the limit wait; one past it is a RangeError, never "at once"', async () => {
    const answer = () =>
      new Response(
        'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
        { headers: { 'content-type': 'text/event-stream' } },
      )
    let attempts = 0
    const run = (policy: RelayPolicy) =>
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt: async () => {
          attempts++
          await new Promise((resolve) => setTimeout(resolve, 30))
          return answer()
        },
        policy,
      })
    const outcome = await run({
      deadlineMs: limit,
      hedge: createHedging({ afterMs: limit, sameKey: true }),
    })
    expect(outcome.kind).toBe('committed')
    expect(attempts).toBe(1)
    await expect(run({ deadlineMs: 2 ** 31 })).rejects.toThrow(RangeError)
    expect(() => createHedging({ afterMs: 2 ** 31, sameKey: true })).toThrow(RangeError)
    expect(attempts).toBe(1)
  })
})
