/**
 * One timer per attempt: the pump's watchdog takes the attempt's first-output clock's timer
 * over at commit instead of setting its own. Whichever falls due first (the clock's old
 * bound or the watchdog's), the post-commit bounds hold to the millisecond, the pre-commit
 * bounds no longer apply, and no timer outlives the request. Through `relay()` and a relay
 * built with `createRelay()`.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  createMemoryKeyPool,
  createRelay,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  webSink,
} from '../../src/index.js'
import { scriptedBody } from '../../src/testing/scripted-body.js'
import { useFakeClock } from '../support/timers.js'

const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
const text = (t: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}},"finish_reason":null}]}\n\n`

afterEach(() => {
  vi.useRealTimers()
})

type Relayed = (policy: RelayPolicy, attempt: () => Response) => Promise<RelayOutcome>

const twins: [string, Relayed][] = [
  [
    'relay()',
    (policy, attempt) => {
      const { sink } = webSink()
      const pool = createMemoryKeyPool([{ id: 'k', secret: 'sk-timer' }])
      return relay({ sink, pool, adapter: openaiChat, policy, attempt: async () => attempt() })
    },
  ],
  [
    'createRelay()',
    (policy, attempt) => {
      const { sink } = webSink()
      const pool = createMemoryKeyPool([{ id: 'k', secret: 'sk-timer' }])
      const built = createRelay({
        pool,
        adapter: openaiChat,
        policy,
        attempt: async () => attempt(),
      })
      return built({ sink })
    },
  ],
]

/** An upstream that sends one text frame at once, then nothing, ever. */
function stalled() {
  const body = scriptedBody([{ bytes: role + text('a') }, { hang: true }])
  const response = new Response(body.stream, { headers: { 'content-type': 'text/event-stream' } })
  return { body, response }
}

describe.each(twins)('the watchdog on the first-output clock’s timer, %s', (_name, relayed) => {
  const cases: [string, RelayPolicy, number][] = [
    // The clock's timer falls due first (50 ms after the send): kept, it fires early, and the
    // watchdog arms again for the rest of its idle bound.
    [
      'clock due first',
      { peek: { firstByteTimeoutMs: 50, firstOutputTimeoutMs: 200 }, idleTimeoutMs: 1_000 },
      1_000,
    ],
    // The watchdog's bound falls due first: a timer of its own, at its bound.
    [
      'watchdog due first',
      { peek: { firstByteTimeoutMs: 5_000 }, idleTimeoutMs: 100, writeStallTimeoutMs: 10_000 },
      100,
    ],
  ]
  it.each(cases)(
    '%s: the idle bound ends the answer at its bound, the peek’s bounds never after commit',
    async (_case, policy, idleMs) => {
      useFakeClock()
      const { body, response } = stalled()
      let settled = false
      const outcome = relayed(
        { keepAliveIntervalMs: Number.POSITIVE_INFINITY, ...policy },
        () => response,
      ).finally(() => {
        settled = true
      })
      await vi.advanceTimersByTimeAsync(idleMs - 1)
      expect(settled).toBe(false)
      // One timer at a time: the watchdog's (the clock's, taken over), none left behind by the peek.
      expect(vi.getTimerCount()).toBe(1)
      await vi.advanceTimersByTimeAsync(1)
      const ended = await outcome
      expect(ended.kind).toBe('committed')
      expect(ended.kind === 'committed' && ended.end).toMatchObject({
        kind: 'error-written',
        cause: 'idle-timeout',
      })
      expect(body.cancelled).toBe(true)
      expect(vi.getTimerCount()).toBe(0)
    },
  )

  it('an attempt that never commits leaves no timer behind (its clock’s timer is cleared with it)', async () => {
    useFakeClock()
    const body = scriptedBody([{ hang: true }])
    const response = new Response(body.stream, { headers: { 'content-type': 'text/event-stream' } })
    const outcome = relayed(
      {
        keepAliveIntervalMs: Number.POSITIVE_INFINITY,
        maxAttempts: 1,
        peek: { firstByteTimeoutMs: 100 },
      },
      () => response,
    )
    await vi.advanceTimersByTimeAsync(100)
    const ended = await outcome
    expect(ended.kind).toBe('failed')
    expect(ended.attempts[0]?.result).toBe('first-byte-timeout')
    expect(vi.getTimerCount()).toBe(0)
  })
})
