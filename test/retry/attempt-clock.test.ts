/**
 * An attempt's first-byte and first-output bounds run on one timer, from the send through the
 * peek (not two in the send and two more in the peek), and still fire as they did: first-byte
 * while no byte came, first-output once bytes but no output came. Counted, not timed.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { createMemoryKeyPool, openaiChat, type RelayOutcome, relay } from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

const firstByteTimeoutMs = 31_111
const firstOutputTimeoutMs = 62_222

function relayOf(behaviour: Behaviour) {
  const upstream = scriptedUpstream([behaviour])
  const outcome: Promise<RelayOutcome> = relay({
    sink: createRecordingSink(),
    pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-test-clock-0123456789' }]),
    adapter: openaiChat,
    attempt: upstream.attempt,
    policy: {
      maxAttempts: 1,
      keepAliveIntervalMs: Number.POSITIVE_INFINITY,
      peek: { firstByteTimeoutMs, firstOutputTimeoutMs },
    },
  })
  return { outcome, upstream }
}

afterEach(() => {
  vi.restoreAllMocks()
  vi.useRealTimers()
})

describe('the attempt clock', () => {
  it('sets one timer for the first-byte and first-output bounds of an attempt', async () => {
    const spy = vi.spyOn(globalThis, 'setTimeout')
    const { outcome } = relayOf({ steps: [{ bytes: fixtureBytes('openai-chat/text.sse') }] })
    expect((await outcome).kind).toBe('committed')
    // What is left of a bound when its timer is set (the send and the peek take a moment).
    const near = (delay: number, bound: number) => delay <= bound && delay > bound - 500
    const bounds = spy.mock.calls.filter(([, ms]) => {
      const delay = Number(ms)
      return near(delay, firstByteTimeoutMs) || near(delay, firstOutputTimeoutMs)
    })
    expect(bounds).toHaveLength(1)
  })

  it('ends an attempt with no byte at the first-byte bound', async () => {
    useFakeClock()
    const { outcome, upstream } = relayOf({ steps: [{ hang: true }] })
    await vi.advanceTimersByTimeAsync(firstByteTimeoutMs - 1)
    expect(upstream.calls[0]?.body?.released).toBe(false)
    await vi.advanceTimersByTimeAsync(2)
    expect(await outcome).toMatchObject({ kind: 'failed', reason: 'first-byte-timeout' })
    expect(upstream.calls[0]?.body?.released).toBe(true)
  })

  it('ends an attempt with bytes but no output at the first-output bound, not the first-byte one', async () => {
    useFakeClock()
    const { outcome, upstream } = relayOf({
      steps: [{ bytes: ': keep-alive\n\n' }, { hang: true }],
    })
    await vi.advanceTimersByTimeAsync(firstOutputTimeoutMs - 1)
    expect(upstream.calls[0]?.body?.released).toBe(false)
    await vi.advanceTimersByTimeAsync(2)
    expect(await outcome).toMatchObject({ kind: 'failed', reason: 'first-output-timeout' })
    expect(upstream.calls[0]?.body?.released).toBe(true)
  })
})
