/**
 * Issue 46, point 3: requests waiting for a cooling key are not all released the instant its
 * cooldown ends. The wake rule as a property, and many relays waiting on one cooled key.
 */

import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { createMemoryKeyPool, openaiChat, relay } from '../../src/index.js'
import { spreadWake } from '../../src/retry/route/lease.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { runs } from '../support/runs.js'

const chunk = (delta: object, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`

describe('waking from a cooling key', () => {
  it('a request waiting for a cooling key wakes after the cooldown, within a quarter of it (at most 1 s more) and never past its budget', () => {
    fc.assert(
      fc.property(
        fc.double({ min: 0, max: 3_600_000, noNaN: true }),
        fc.double({ min: 0, max: 3_600_000, noNaN: true }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (ms, budgetMs, draw) => {
          const wake = spreadWake(ms, budgetMs, () => draw)
          expect(wake).toBeGreaterThanOrEqual(ms)
          expect(wake - ms).toBeLessThanOrEqual(Math.min(ms / 4, 1_000) + 1e-9)
          if (budgetMs >= ms) expect(wake).toBeLessThanOrEqual(budgetMs + 1e-9)
          else expect(wake).toBe(ms)
        },
      ),
      { numRuns: runs(500) },
    )
  })

  it('24 requests waiting on one cooled key are sent over a spread, not at one instant', async () => {
    const pool = createMemoryKeyPool([{ id: 'only', secret: 'sk-spread-0123456789' }])
    const first = await pool.acquire()
    if (first.kind !== 'leased') throw new Error('no lease')
    await first.lease.report({ kind: 'rate-limited', retryAfterMs: 1_000 })
    const sentAt: number[] = []
    const started = performance.now()
    const outcomes = await Promise.all(
      Array.from({ length: 24 }, () =>
        relay({
          sink: createRecordingSink(),
          adapter: openaiChat,
          pool,
          policy: { deadlineMs: 5_000, maxWaitMs: 5_000 },
          attempt: async () => {
            sentAt.push(performance.now() - started)
            return new Response(`${chunk({ content: 'hi' })}${chunk({}, 'stop')}data: [DONE]\n\n`, {
              headers: { 'content-type': 'text/event-stream' },
            })
          },
        }),
      ),
    )
    expect(outcomes.every((outcome) => outcome.ok)).toBe(true)
    expect(sentAt).toHaveLength(24)
    expect(Math.min(...sentAt)).toBeGreaterThanOrEqual(990)
    // Without the spread all 24 wake on one timer and are sent one after another as fast as
    // the event loop runs them (35 ms apart at most on a loaded 2-core VM); with it they are
    // drawn over the 250 ms after the cooldown's end (the widest gap of 24 uniform draws is
    // under 120 ms with a chance below one in a million).
    expect(Math.max(...sentAt) - Math.min(...sentAt)).toBeGreaterThan(120)
  })
})
