import { afterEach, describe, expect, it, vi } from 'vitest'
import { relayDefaults } from '../../src/advanced.js'
import {
  createMemoryKeyPool,
  type KeyPool,
  openaiChat,
  type RelayRequestOptions,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { text as decode } from '../support/sources.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
const text = (t: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}},"finish_reason":null}]}\n\n`
const reasoning =
  'data: {"choices":[{"index":0,"delta":{"reasoning_content":"Thinking."},"finish_reason":null}]}\n\n'
const complete = fixtureBytes('openai-chat/text.sse')
const completeText = decode(complete)

const ok: Behaviour = { steps: [{ bytes: complete }] }
const emptyEof: Behaviour = { steps: [{ bytes: role }] }

function keys(...ids: string[]) {
  return ids.map((id) => ({ id, secret: `sk-secret-${id}-0123456789` }))
}

async function run(
  script: Behaviour[],
  options: Partial<RelayRequestOptions> & { pool?: KeyPool } = {},
  ids = ['a', 'b'],
) {
  const sink = createRecordingSink()
  const pool = options.pool ?? createMemoryKeyPool(keys(...ids))
  const upstream = scriptedUpstream(script)
  const outcome = await relay({
    sink,
    pool,
    adapter: openaiChat,
    attempt: upstream.attempt,
    ...options,
  })
  return { sink, pool, outcome, calls: upstream.calls }
}

const outcomesOf = async (pool: ReturnType<typeof createMemoryKeyPool>, id: string) =>
  (await pool.stats()).find((s) => s.id === id)?.outcomes

afterEach(() => {
  vi.useRealTimers()
})

describe('relay', () => {
  it('empty EOF → retried once and succeeds: the client sees one clean stream', async () => {
    const { sink, outcome, calls, pool } = await run([emptyEof, ok])
    expect(outcome.kind).toBe('committed')
    expect(calls.map((c) => c.keyId)).toEqual(['a', 'b'])
    expect(sink.text).toBe(completeText)
    expect(outcome.attempts.map((a) => a.result)).toEqual(['empty', 'committed'])
    expect(calls.every((c) => c.body?.released)).toBe(true)
    // Empty stream → key not cooled down: a protocol fault is not the key's fault.
    expect(pool.toJSON().keys.find((k) => k.id === 'a')).toMatchObject({
      cooldownUntil: 0,
      failures: 0,
      circuit: 'closed',
    })
    expect((await outcomesOf(pool, 'a'))?.['protocol-fault']).toBe(1)
  })

  it('empty EOF twice with one retry → 502 with the protocol JSON error body', async () => {
    const { sink, outcome } = await run([emptyEof, emptyEof], { policy: { maxAttempts: 2 } })
    expect(outcome).toMatchObject({ kind: 'failed', status: 502, reason: 'empty' })
    expect(sink.status).toBe(502)
    expect(JSON.parse(sink.text)).toMatchObject({
      error: { type: 'upstream_error', message: 'the upstream stream ended without any output' },
    })
  })

  it('retries disabled (maxAttempts: 1) → no retry', async () => {
    const { outcome, calls } = await run([emptyEof, ok], { policy: { maxAttempts: 1 } })
    expect(calls).toHaveLength(1)
    expect(outcome.kind).toBe('failed')
    expect(relayDefaults.maxAttempts).toBe(3)
  })

  it('partial EOF → no retry; honest error by default, a synthesized stop when asked', async () => {
    const partial: Behaviour = { steps: [{ bytes: role + text('Hel') }] }
    const honest = await run([partial, ok])
    expect(honest.calls).toHaveLength(1)
    expect(honest.outcome).toMatchObject({
      kind: 'committed',
      end: { kind: 'error-written', cause: 'partial-eof' },
    })
    expect(honest.sink.text).not.toContain('[DONE]')
    const synthesized = await run([partial, ok], { policy: { onPartialEof: 'synthesize-stop' } })
    expect(synthesized.calls).toHaveLength(1)
    expect(synthesized.outcome).toMatchObject({ end: { kind: 'stop-synthesized' } })
    expect(synthesized.sink.text).toMatch(/data: \[DONE\]\n\n$/)
  })

  it('thinking-only EOF → reasoning promoted to text per policy', async () => {
    const { sink, outcome, calls } = await run([{ steps: [{ bytes: role + reasoning }] }], {
      policy: { onThinkingOnly: 'promote-reasoning' },
    })
    expect(calls).toHaveLength(1)
    expect(outcome).toMatchObject({ kind: 'committed', end: { kind: 'reasoning-promoted' } })
    expect(sink.text).toContain('"content":"Thinking."')
  })

  it('error frame before output → retried', async () => {
    const overloaded: Behaviour = {
      steps: [
        { bytes: `${role}data: {"error":{"message":"Overloaded","type":"server_error"}}\n\n` },
      ],
    }
    const { outcome, sink } = await run([overloaded, ok])
    expect(outcome.kind).toBe('committed')
    expect(outcome.attempts[0]?.result).toBe('error-frame:server_error')
    expect(sink.text).toBe(completeText)
  })

  it('a non-retryable error frame is not retried and its status and message reach the client', async () => {
    const invalid: Behaviour = {
      steps: [
        {
          bytes:
            'data: {"error":{"message":"max_tokens is too large","type":"invalid_request_error"}}\n\n',
        },
      ],
    }
    const { outcome, sink, calls } = await run([invalid, ok])
    expect(calls).toHaveLength(1)
    expect(outcome).toMatchObject({ kind: 'failed', status: 400 })
    expect(JSON.parse(sink.text)).toMatchObject({
      error: { message: 'max_tokens is too large', type: 'invalid_request_error' },
    })
  })

  it('keep-alives only → first-output timeout → retried', async () => {
    useFakeClock()
    const keepalives: Behaviour = {
      steps: Array.from({ length: 40 }, () => [
        { bytes: ': keep-alive\n\n' },
        { wait: 100 },
      ]).flat(),
    }
    const pending = run([keepalives, ok], { policy: { peek: { firstOutputTimeoutMs: 1000 } } })
    await vi.advanceTimersByTimeAsync(1500)
    const { outcome, calls } = await pending
    expect(outcome.kind).toBe('committed')
    expect(outcome.attempts[0]?.result).toBe('first-output-timeout')
    expect(calls[0]?.body?.cancelled).toBe(true)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('hung upstream (no byte) → first-byte watchdog → retried', async () => {
    useFakeClock()
    const pending = run([{ steps: [{ hang: true }] }, ok], {
      policy: { peek: { firstByteTimeoutMs: 2000 } },
    })
    await vi.advanceTimersByTimeAsync(2500)
    const { outcome, calls } = await pending
    expect(outcome.kind).toBe('committed')
    expect(outcome.attempts[0]?.result).toBe('first-byte-timeout')
    expect(calls[0]?.body?.cancelled).toBe(true)
  })

  it('429 with retry-after: 20 on key A while B is free → B at once, A cooling for 20 s', async () => {
    useFakeClock()
    const started = Date.now()
    const pending = run([
      {
        status: 429,
        headers: { 'retry-after': '20' },
        steps: [{ bytes: '{"error":{"message":"slow down","type":"rate_limit_error"}}' }],
      },
      ok,
    ])
    await vi.advanceTimersByTimeAsync(0)
    const { outcome, calls, pool } = await pending
    expect(calls.map((c) => c.keyId)).toEqual(['a', 'b'])
    expect(outcome.kind).toBe('committed')
    expect(outcome.kind === 'committed' && outcome.timeToFirstOutputMs).toBeLessThan(50)
    expect(pool.toJSON().keys[0]?.cooldownUntil).toBe(started + 20_000)
    expect(calls[0]?.body?.released).toBe(true)
  })

  it.each([
    ['retry-after-ms', '1e12'],
    ['retry-after', '1e12'],
    ['retry-after', '9'.repeat(40)],
  ])(
    '429 with %s: %s cools the key for maxCooldownMs, not the 10 s default',
    async (name, value) => {
      useFakeClock()
      const started = Date.now()
      const pool = createMemoryKeyPool(keys('a', 'b'), { maxCooldownMs: 7_200_000 })
      const { outcome, calls } = await run([{ status: 429, headers: { [name]: value } }, ok], {
        pool,
      })
      expect(calls.map((c) => c.keyId)).toEqual(['a', 'b'])
      expect(outcome.kind).toBe('committed')
      expect(pool.toJSON().keys[0]?.cooldownUntil).toBe(started + 7_200_000)
    },
  )

  it('all keys cooling → waits for the earliest within the deadline', async () => {
    useFakeClock()
    const limited = (seconds: number): Behaviour => ({
      status: 429,
      headers: { 'retry-after': String(seconds) },
    })
    const onRetry = vi.fn()
    const pending = run([limited(5), limited(3), ok], {
      policy: { deadlineMs: 10_000 },
      hooks: { onRetry },
    })
    await vi.advanceTimersByTimeAsync(2999)
    expect(onRetry).toHaveBeenCalledTimes(1)
    // The earliest cooldown (3 s), then at most a quarter of it spread (waiters do not all
    // wake at one instant).
    await vi.advanceTimersByTimeAsync(1 + 750)
    const { outcome, calls } = await pending
    expect(calls.map((c) => c.keyId)).toEqual(['a', 'b', 'b'])
    expect(outcome.kind).toBe('committed')
    expect(onRetry.mock.calls.map(([c]) => [c.reason, c.nextKeyId])).toEqual([
      ['status-429', 'b'],
      ['status-429', 'b'],
    ])
    const delays = onRetry.mock.calls.map(([c]) => c.delayMs)
    expect(delays[0]).toBe(0)
    expect(delays[1]).toBeGreaterThanOrEqual(3000)
    expect(delays[1]).toBeLessThanOrEqual(3750)
    expect(Object.isFrozen(onRetry.mock.calls[0]?.[0])).toBe(true)
  })

  it('all keys cooling past the deadline → 429 with retry-after, without waiting', async () => {
    useFakeClock()
    const limited = (seconds: number): Behaviour => ({
      status: 429,
      headers: { 'retry-after': String(seconds) },
    })
    const pending = run([limited(60), limited(30), ok], { policy: { deadlineMs: 10_000 } })
    await vi.advanceTimersByTimeAsync(0)
    const { outcome, calls, sink } = await pending
    expect(calls).toHaveLength(2)
    expect(outcome).toMatchObject({ kind: 'failed', status: 429, reason: 'all-keys-rate-limited' })
    expect(sink.status).toBe(429)
    const head = sink.events[0]
    expect(head?.type === 'head' && head.headers.get('retry-after')).toBe('30')
  })

  it('401 → key disabled, next key used', async () => {
    const { outcome, calls, pool } = await run([
      { status: 401, steps: [{ bytes: '{"error":{"message":"bad key sk-secret-a-0123456789"}}' }] },
      ok,
    ])
    expect(calls.map((c) => c.keyId)).toEqual(['a', 'b'])
    expect(outcome.kind).toBe('committed')
    expect(pool.toJSON().keys[0]?.disabled).toBe(true)
    expect(JSON.stringify(outcome)).not.toContain('sk-secret')
  })

  it('client abort during the pause before reusing the key → stops at once, upstream released, no key penalised', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const pool = createMemoryKeyPool(keys('only'))
    const upstream = scriptedUpstream([emptyEof, ok])
    const pending = relay({
      sink,
      pool,
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { backoff: { baseMs: 5000, jitter: 0 } },
    })
    // An empty stream says nothing about load: the pause is short (10–50 ms), not the backoff.
    await vi.advanceTimersByTimeAsync(5)
    expect(upstream.calls).toHaveLength(1)
    sink.disconnect()
    await vi.advanceTimersByTimeAsync(0)
    const outcome = await pending
    expect(outcome.kind).toBe('client-gone')
    expect(upstream.calls).toHaveLength(1)
    expect(upstream.calls[0]?.body?.released).toBe(true)
    const stats = await pool.stats()
    expect(stats[0]?.inflight).toBe(0)
    expect(pool.toJSON().keys[0]).toMatchObject({ cooldownUntil: 0, failures: 0, disabled: false })
    expect(vi.getTimerCount()).toBe(0)
  })

  it('x-should-retry: false on a 503 → no retry', async () => {
    const { outcome, calls } = await run([
      { status: 503, headers: { 'x-should-retry': 'false' } },
      ok,
    ])
    expect(calls).toHaveLength(1)
    expect(outcome).toMatchObject({ kind: 'failed', status: 503 })
  })

  it('x-should-retry: true on a 400 → retried', async () => {
    const { outcome, calls } = await run([
      { status: 400, headers: { 'x-should-retry': 'true' } },
      ok,
    ])
    expect(calls).toHaveLength(2)
    expect(outcome.kind).toBe('committed')
  })

  it('background priority + 529 → no retry', async () => {
    const { outcome, calls, sink } = await run([{ status: 529 }, ok], {
      policy: { priority: 'background' },
    })
    expect(calls).toHaveLength(1)
    expect(outcome).toMatchObject({ kind: 'failed', status: 529 })
    expect(sink.status).toBe(529)
  })

  it('three consecutive 529 → next route', async () => {
    const sink = createRecordingSink()
    const primary = scriptedUpstream([{ status: 529 }])
    const fallback = scriptedUpstream([ok])
    const outcome = await relay({
      sink,
      pool: createMemoryKeyPool(keys('a', 'b', 'c', 'd')),
      adapter: openaiChat,
      attempt: primary.attempt,
      policy: {
        maxAttempts: 5,
        backoff: { baseMs: 1 },
        routes: [
          {
            name: 'fallback-model',
            adapter: openaiChat,
            pool: createMemoryKeyPool(keys('f')),
            attempt: fallback.attempt,
          },
        ],
      },
    })
    expect(primary.calls).toHaveLength(3)
    expect(fallback.calls).toHaveLength(1)
    expect(outcome).toMatchObject({ kind: 'committed', route: 'fallback-model', keyId: 'f' })
    expect(sink.text).toBe(completeText)
  })

  it('a 200 with a JSON error body is not an event stream → retried', async () => {
    const jsonError: Behaviour = {
      headers: { 'content-type': 'application/json' },
      steps: [{ bytes: '{"error":{"message":"upstream busy","type":"server_error"}}' }],
    }
    const { outcome, calls } = await run([jsonError, ok])
    expect(outcome.attempts[0]?.result).toBe('not-sse')
    expect(calls[0]?.body?.released).toBe(true)
    expect(outcome.kind).toBe('committed')
  })

  it('a connection error is retried with another key and reported with an actionable message', async () => {
    const reset = Object.assign(new TypeError('fetch failed'), {
      cause: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
    })
    const { outcome } = await run([{ throws: reset }], { policy: { backoff: { baseMs: 1 } } })
    expect(outcome).toMatchObject({
      kind: 'failed',
      status: 502,
      reason: 'connection-ECONNRESET',
      error: { message: 'connection reset by the upstream' },
    })
  })

  it('with early headers, a failure before content is written in-band, not as a status', async () => {
    const { sink, outcome } = await run([emptyEof], {
      policy: { earlyHeaders: true, maxAttempts: 2, keepAliveIntervalMs: Number.POSITIVE_INFINITY },
    })
    expect(outcome).toMatchObject({ kind: 'failed', status: 502 })
    expect(sink.status).toBe(200)
    expect(sink.text).toBe(
      decode(
        openaiChat.renderError({
          type: 'upstream_error',
          message: 'the upstream stream ended without any output',
        }),
      ),
    )
  })

  it('calls onAttempt, onCommit and onOutcome with frozen contexts that carry no secret', async () => {
    const seen: unknown[] = []
    const record = (context: unknown) => {
      expect(Object.isFrozen(context)).toBe(true)
      seen.push(context)
    }
    await run([emptyEof, ok], {
      hooks: { onAttempt: record, onRetry: record, onCommit: record, onOutcome: record },
    })
    expect(seen).toHaveLength(5)
    expect(JSON.stringify(seen)).not.toContain('sk-secret')
  })
})
