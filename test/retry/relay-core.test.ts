import fc from 'fast-check'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  type AttemptFunction,
  createMemoryKeyPool,
  type DownstreamSink,
  type DownstreamTransform,
  type KeyPool,
  openaiChat,
  type RelayHooks,
  type RelayPolicy,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { normalizeRelayPolicy, relayDefaults } from '../../src/retry/policy.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import type { ScriptStep } from '../../src/testing/scripted-body.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { runs } from '../support/runs.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

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
      expect(sink.events).toHaveLength(0)
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

// --- Faults at every await point ---------------------------------------------------------

type SinkFault = 'none' | 'sendHead' | 'write' | 'flush' | 'close' | 'disconnect'
type HookFault = 'none' | keyof RelayHooks
type UpstreamKind =
  | 'ok'
  | 'empty'
  | 'status-500'
  | 'status-429'
  | 'throws'
  | 'not-response'
  | 'read-error'
  | 'hang'
  | 'partial'

function upstreamBehaviour(kind: UpstreamKind): Behaviour | 'not-response' {
  const steps = (...parts: (string | ScriptStep)[]): ScriptStep[] =>
    parts.map((p) => (typeof p === 'string' ? { bytes: p } : p))
  switch (kind) {
    case 'ok':
      return ok
    case 'empty':
      return emptyEof
    case 'status-500':
      return { status: 500, steps: steps('{"error":{"message":"boom"}}') }
    case 'status-429':
      return {
        status: 429,
        headers: { 'retry-after': '1' },
        steps: steps('{"error":{"message":"slow"}}'),
      }
    case 'throws':
      return { throws: new TypeError('fetch failed') }
    case 'not-response':
      return 'not-response'
    case 'read-error':
      return { steps: steps(role, { error: new Error('socket reset') }) }
    case 'partial':
      return {
        steps: steps(
          role,
          'data: {"choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}\n\n',
          { error: new Error('cut') },
        ),
      }
    case 'hang':
      return { steps: [{ hang: true }] }
  }
}

function faultySink(fault: SinkFault, after: number) {
  const recording = createRecordingSink()
  let calls = 0
  const maybeThrow = (method: SinkFault) => {
    if (fault === method && calls++ >= after) throw new Error(`${method} failed`)
  }
  const sink: DownstreamSink = {
    signal: recording.signal,
    sendHead(status, headers) {
      maybeThrow('sendHead')
      return recording.sendHead(status, headers)
    },
    write(chunk) {
      maybeThrow('write')
      return recording.write(chunk)
    },
    flush() {
      maybeThrow('flush')
    },
    close() {
      maybeThrow('close')
      return recording.close()
    },
    abort(reason) {
      recording.abort(reason)
    },
  }
  return { sink, recording }
}

describe('lease property', () => {
  it('a throw or an abort at any await point of an attempt (attempt function, each sink method, each hook, the reader) leaves every in-flight count at 0 and the outcome counts equal to the leases', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.constantFrom<UpstreamKind>(
            'ok',
            'empty',
            'status-500',
            'status-429',
            'throws',
            'not-response',
            'read-error',
            'hang',
            'partial',
          ),
          { minLength: 1, maxLength: 5 },
        ),
        fc.constantFrom<SinkFault>('none', 'sendHead', 'write', 'flush', 'close', 'disconnect'),
        fc.integer({ min: 0, max: 2 }),
        fc.constantFrom<HookFault>(
          'none',
          'onAttempt',
          'onRetry',
          'onCommit',
          'onGiveUp',
          'onOutcome',
        ),
        fc.record({
          keyCount: fc.integer({ min: 1, max: 3 }),
          maxInflight: fc.constantFrom(1, 2, Number.POSITIVE_INFINITY),
          maxAttempts: fc.integer({ min: 1, max: 4 }),
          earlyHeaders: fc.boolean(),
          deadlineMs: fc.option(fc.integer({ min: 500, max: 6_000 }), { nil: undefined }),
          disconnectAt: fc.integer({ min: 0, max: 4_000 }),
        }),
        async (script, sinkFault, after, hookFault, setup) => {
          useFakeClock()
          const pool = createMemoryKeyPool(
            Array.from({ length: setup.keyCount }, (_, i) => ({
              id: `k${i}`,
              secret: `sk-secret-${i}-abcdefgh`,
            })),
            { maxInflight: setup.maxInflight },
          )
          const { sink, recording } = faultySink(sinkFault, after)
          const upstream = scriptedUpstream((call) => {
            const behaviour = upstreamBehaviour(
              script[Math.min(call, script.length - 1)] as UpstreamKind,
            )
            return behaviour === 'not-response' ? { status: 200 } : behaviour
          })
          let call = 0
          const attempt: AttemptFunction = async (context) => {
            const kind = script[Math.min(call++, script.length - 1)]
            if (kind === 'not-response') return 'nope' as unknown as Response
            return upstream.attempt(context)
          }
          const hooks: RelayHooks =
            hookFault === 'none'
              ? {}
              : {
                  [hookFault]: () => {
                    throw new Error('hook failed')
                  },
                }
          const pending = relay({
            sink,
            pool,
            adapter: openaiChat,
            attempt,
            hooks,
            policy: {
              maxAttempts: setup.maxAttempts,
              earlyHeaders: setup.earlyHeaders,
              deadlineMs: setup.deadlineMs,
              keepAliveIntervalMs: 0,
              backoff: { baseMs: 100, maxMs: 400 },
              peek: { firstByteTimeoutMs: 1_000, firstOutputTimeoutMs: 1_500 },
              idleTimeoutMs: 2_000,
            },
          })
          if (sinkFault === 'disconnect') {
            await vi.advanceTimersByTimeAsync(setup.disconnectAt)
            recording.disconnect()
          }
          await vi.advanceTimersByTimeAsync(60_000)
          const outcome = await pending
          expect(['committed', 'failed', 'client-gone']).toContain(outcome.kind)
          const stats = await pool.stats()
          expect(stats.reduce((n, s) => n + s.inflight, 0)).toBe(0)
          const leased = stats.reduce((n, s) => n + s.leases, 0)
          const reported = stats.reduce(
            (n, s) => n + Object.values(s.outcomes).reduce((a, b) => a + b, 0),
            0,
          )
          expect(reported).toBe(leased)
          expect(leased).toBeGreaterThanOrEqual(outcome.attempts.length)
          expect(upstream.calls.every((c) => c.body === undefined || c.body.released)).toBe(true)
          expect(vi.getTimerCount()).toBe(0)
          vi.useRealTimers()
        },
      ),
      { numRuns: runs(150) },
    )
  })
})
