import { getEventListeners } from 'node:events'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  type AttemptFunction,
  createMemoryKeyPool,
  type DownstreamSink,
  type DownstreamTransform,
  type KeyPool,
  openaiChat,
  type RelayPolicy,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { normalizeRelayPolicy, relayDefaults } from '../../src/retry/relay/policy.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { runs } from '../support/runs.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'
import { checkLeaseProperty } from './lease-property.js'

afterEach(() => {
  vi.useRealTimers()
})

const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
const ok: Behaviour = { steps: [{ bytes: fixtureBytes('openai-chat/text.sse') }] }
const emptyEof: Behaviour = { steps: [{ bytes: role }] }

const keys = (...ids: string[]) => ids.map((id) => ({ id, secret: `sk-secret-${id}-0123456789` }))

async function inflight(pool: KeyPool): Promise<number> {
  return (await pool.stats()).reduce((n, s) => n + s.inflight, 0)
}

async function leases(pool: KeyPool): Promise<number> {
  return (await pool.stats()).reduce((n, s) => n + s.leases, 0)
}

describe('policy: one normalize, merged defaults, validated before any key is leased', () => {
  it('setting one peek option keeps the other peek defaults (the first-byte watchdog stays)', () => {
    const config = normalizeRelayPolicy({ peek: { maxPeekFrames: 64 } })
    expect(config.peek).toMatchObject({
      maxPeekFrames: 64,
      firstByteTimeoutMs: relayDefaults.peek.firstByteTimeoutMs,
      firstOutputTimeoutMs: relayDefaults.peek.firstOutputTimeoutMs,
    })
    expect(normalizeRelayPolicy({ backoff: { baseMs: 10 } }).backoff).toEqual({
      ...relayDefaults.backoff,
      baseMs: 10,
    })
  })

  const bad: [string, RelayPolicy, RegExp][] = [
    ['peek.firstOutputTimeoutMs: 0', { peek: { firstOutputTimeoutMs: 0 } }, /firstOutputTimeoutMs/],
    ['peek.firstByteTimeoutMs: -1', { peek: { firstByteTimeoutMs: -1 } }, /firstByteTimeoutMs/],
    ['peek.maxPeekFrames: 0', { peek: { maxPeekFrames: 0 } }, /maxPeekFrames/],
    ['idleTimeoutMs: 0', { idleTimeoutMs: 0 }, /idleTimeoutMs/],
    ['maxFrameBytes: 0', { maxFrameBytes: 0 }, /maxFrameBytes/],
    ['maxAttempts: 0', { maxAttempts: 0 }, /maxAttempts/],
    ['deadlineMs: NaN', { deadlineMs: Number.NaN }, /deadlineMs/],
    ['backoff.jitter: 2', { backoff: { jitter: 2 } }, /backoff\.jitter/],
    ['priority: urgent', { priority: 'urgent' as 'background' }, /priority/],
    ['onPartialEof: maybe', { onPartialEof: 'maybe' as 'error' }, /onPartialEof/],
    ['retryOn: [42]', { retryOn: [42] }, /retryOn/],
    ['maxWaitMs: 0', { maxWaitMs: 0 }, /maxWaitMs/],
    ['keepAliveIntervalMs: -5', { keepAliveIntervalMs: -5 }, /keepAliveIntervalMs/],
    [
      'downstream.adapter: {}',
      { downstream: { adapter: {} as StreamAdapter } },
      /^downstream\.adapter must be a StreamAdapter$/,
    ],
    [
      'downstream.transform: 1',
      { downstream: { transform: 1 as unknown as DownstreamTransform } },
      /^downstream\.transform must be a function, got number$/,
    ],
    [
      'downstream.keepAlive: always',
      { downstream: { keepAlive: 'always' as unknown as boolean } },
      /^downstream\.keepAlive must be true, false or 'before-content', got always$/,
    ],
    [
      'nonStreamingFallback.timeoutMs: 0',
      { nonStreamingFallback: { timeoutMs: 0 } },
      /nonStreamingFallback\.timeoutMs/,
    ],
  ]
  it.each(bad)(
    '%s rejects naming the option, with nothing leased',
    async (_name, policy, message) => {
      const pool = createMemoryKeyPool(keys('a'))
      const upstream = scriptedUpstream([ok])
      const sink = createRecordingSink()
      await expect(
        relay({ sink, pool, adapter: openaiChat, attempt: upstream.attempt, policy }),
      ).rejects.toThrow(message)
      expect(await leases(pool)).toBe(0)
      expect(upstream.calls).toHaveLength(0)
      // The client is answered (a 500 in its protocol naming the option), never cut.
      expect(sink.events.map((event) => event.type)).toEqual(['head', 'write', 'close'])
      const [head, write] = sink.events
      expect(head).toMatchObject({ type: 'head', status: 500 })
      const body = new TextDecoder().decode((write as { bytes: Uint8Array }).bytes)
      const said = JSON.parse(body).error.message as string
      expect(said.startsWith('the gateway is misconfigured: ')).toBe(true)
      expect(said.slice('the gateway is misconfigured: '.length)).toMatch(message)
    },
  )
})

describe('every lease is reported exactly once', () => {
  it('an attempt function that resolves to something that is not a Response: 502, no retry, slot freed', async () => {
    const pool = createMemoryKeyPool(keys('a', 'b'))
    const sink = createRecordingSink()
    let calls = 0
    const attempt = (async () => {
      calls++
      return { status: 200, body: null }
    }) as unknown as AttemptFunction
    const outcome = await relay({ sink, pool, adapter: openaiChat, attempt })
    expect(outcome).toMatchObject({ kind: 'failed', status: 502, reason: 'invalid-attempt-result' })
    expect(calls).toBe(1)
    expect(sink.status).toBe(502)
    expect(await inflight(pool)).toBe(0)
    expect((await pool.stats()).find((s) => s.id === 'a')?.outcomes.cancelled).toBe(1)
  })

  it('earlyHeaders and the sink throws on sendHead (the client is gone): client-gone, body released, slot freed', async () => {
    const pool = createMemoryKeyPool(keys('a'))
    const recording = createRecordingSink()
    const sink: DownstreamSink = {
      ...recording,
      signal: recording.signal,
      sendHead() {
        throw new Error('socket closed')
      },
    }
    const upstream = scriptedUpstream([ok])
    const outcome = await relay({
      sink,
      pool,
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { earlyHeaders: true },
    })
    expect(outcome.kind).toBe('client-gone')
    expect(upstream.calls[0]?.body?.released).toBe(true)
    expect(await inflight(pool)).toBe(0)
    const stats = (await pool.stats())[0]
    expect(stats?.outcomes['server-error']).toBe(0)
  })
})

describe('decisions that once had no test (each would survive a mutation without it)', () => {
  it('the default first-byte watchdog ends an upstream that sends headers and nothing (no peek policy given)', async () => {
    useFakeClock()
    const upstream = scriptedUpstream([{ steps: [{ hang: true }] }])
    const pending = relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { maxAttempts: 1, peek: { maxPeekFrames: 64 } },
    })
    await vi.advanceTimersByTimeAsync(relayDefaults.peek.firstByteTimeoutMs - 1)
    expect(upstream.calls[0]?.body?.released).toBe(false)
    await vi.advanceTimersByTimeAsync(2)
    const outcome = await pending
    expect(outcome).toMatchObject({ kind: 'failed', status: 504, reason: 'first-byte-timeout' })
    expect(upstream.calls[0]?.body?.released).toBe(true)
  })

  it('background priority does not move to the next route after an overload', async () => {
    const primary = scriptedUpstream([{ status: 529 }])
    const fallback = scriptedUpstream([ok])
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: primary.attempt,
      policy: {
        priority: 'background',
        routes: [
          {
            name: 'other',
            adapter: openaiChat,
            pool: createMemoryKeyPool(keys('z')),
            attempt: fallback.attempt,
          },
        ],
      },
    })
    expect(outcome).toMatchObject({ kind: 'failed', status: 529 })
    expect(primary.calls).toHaveLength(1)
    expect(fallback.calls).toHaveLength(0)
  })

  it('an interactive request does move to the next route after repeated overload', async () => {
    const primary = scriptedUpstream([{ status: 529 }])
    const fallback = scriptedUpstream([ok])
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a', 'b', 'c')),
      adapter: openaiChat,
      attempt: primary.attempt,
      policy: {
        overloadFallbackAfter: 2,
        backoff: { baseMs: 1 },
        routes: [
          {
            name: 'other',
            adapter: openaiChat,
            pool: createMemoryKeyPool(keys('z')),
            attempt: fallback.attempt,
          },
        ],
      },
    })
    expect(outcome).toMatchObject({ kind: 'committed', route: 'other' })
    expect(primary.calls).toHaveLength(2)
  })

  it('when the deadline cuts a later attempt, the client hears the earlier upstream failure (503), not a bare 504', async () => {
    useFakeClock()
    const upstream = scriptedUpstream([{ status: 503 }, { steps: [{ hang: true }] }])
    const pending = relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a', 'b')),
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { deadlineMs: 5_000 },
    })
    await vi.advanceTimersByTimeAsync(5_001)
    const outcome = await pending
    expect(upstream.calls).toHaveLength(2)
    expect(outcome).toMatchObject({ kind: 'failed', status: 503 })
    expect(upstream.calls[1]?.body?.released).toBe(true)
  })
})

describe('key choice after a failure', () => {
  it('b cools 60 s for another request, a ends empty: a is retried after its backoff, no false "rate limited"', async () => {
    const pool = createMemoryKeyPool(keys('a', 'b'))
    const other = await pool.acquire({ exclude: new Set(['a']) })
    if (other.kind !== 'leased') throw new Error('b should be free')
    await other.lease.report({ kind: 'rate-limited', retryAfterMs: 60_000 })
    const upstream = scriptedUpstream([emptyEof, ok])
    const started = performance.now()
    const outcome = await relay({
      sink: createRecordingSink(),
      pool,
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { backoff: { baseMs: 50, jitter: 0 } },
    })
    expect(outcome.kind).toBe('committed')
    expect(upstream.calls.map((c) => c.keyId)).toEqual(['a', 'a'])
    expect(performance.now() - started).toBeLessThan(5_000)
    expect(await inflight(pool)).toBe(0)
  })
})

describe('lease property', () => {
  it('a throw or an abort at any await point of an attempt (attempt function, each sink method, each hook, the reader) leaves every in-flight count at 0 and the outcome counts equal to the leases', async () => {
    await checkLeaseProperty(async (keys, options) => createMemoryKeyPool(keys, options), {
      numRuns: runs(150),
    })
  })
})

describe('a long-lived host signal', () => {
  it('holds no listener once relay settles: committed, retried, failed, client gone', async () => {
    const host = new AbortController()
    const listeners = () => getEventListeners(host.signal, 'abort').length
    const run = async (script: Behaviour[], disconnect = false) => {
      const sink = createRecordingSink()
      const upstream = scriptedUpstream(script)
      const pending = relay({
        sink,
        pool: createMemoryKeyPool(keys('a', 'b')),
        adapter: openaiChat,
        attempt: upstream.attempt,
        signal: host.signal,
        policy: { backoff: { baseMs: 1 }, keepAliveIntervalMs: Number.POSITIVE_INFINITY },
      })
      if (disconnect) sink.disconnect()
      return pending
    }
    expect((await run([ok])).kind).toBe('committed')
    expect(listeners()).toBe(0)
    expect((await run([emptyEof, ok])).kind).toBe('committed')
    expect(listeners()).toBe(0)
    expect((await run([{ status: 400 }])).kind).toBe('failed')
    expect(listeners()).toBe(0)
    expect((await run([{ steps: [{ hang: true }] }], true)).kind).toBe('client-gone')
    expect(listeners()).toBe(0)
  })
})
