import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  createHedging,
  createMemoryKeyPool,
  type Hedging,
  openaiChat,
  type RelayHooks,
  type RelayPolicy,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { type ScriptStep, scriptedBody } from '../../src/testing/scripted-body.js'
import { finish, role, text } from '../support/chat-frames.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

/** An answer from `who` whose first output comes after `ms`. */
const answer = (who: string, ms: number): Behaviour => ({
  steps: [{ wait: ms }, { bytes: role }, { bytes: text(who) }, { bytes: finish }],
})
const stall: Behaviour = { steps: [{ bytes: role }, { hang: true }] }
const status = (code: number, ms = 0, headers?: Record<string, string>): Behaviour => ({
  status: code,
  ...(headers === undefined ? {} : { headers }),
  steps: [{ wait: ms } as ScriptStep, { bytes: '{"error":{"message":"no"}}' }],
})

const keys = (...ids: string[]) => ids.map((id) => ({ id, secret: `sk-${id}-secret-value` }))

/** Warms a hedging budget up with `n` counted requests that need no hedge. */
async function warm(hedging: Hedging, n: number) {
  const pool = createMemoryKeyPool(keys('w'))
  const upstream = scriptedUpstream([answer('warm', 0)])
  for (let i = 0; i < n; i++) {
    const pending = relay({
      sink: createRecordingSink(),
      pool,
      adapter: openaiChat,
      attempt: upstream.attempt,
      name: 'warm-up',
      policy: { hedge: hedging, keepAliveIntervalMs: Number.POSITIVE_INFINITY },
    })
    await vi.advanceTimersByTimeAsync(1)
    await pending
  }
}

/** One hedged request, keyed behaviours by key id (a list repeats its last). */
async function hedged(
  byKey: Record<string, Behaviour | Behaviour[]>,
  policy: RelayPolicy,
  options: {
    hooks?: RelayHooks
    advanceMs?: number
    name?: string
    request?: { url: string; body: Record<string, unknown> }
  } = {},
) {
  const pool = createMemoryKeyPool(keys(...Object.keys(byKey)))
  const uses = new Map<string, number>()
  const upstream = scriptedUpstream((_, context) => {
    const script = byKey[context.key.id] as Behaviour | Behaviour[]
    const n = uses.get(context.key.id) ?? 0
    uses.set(context.key.id, n + 1)
    return Array.isArray(script) ? (script[Math.min(n, script.length - 1)] as Behaviour) : script
  })
  const sink = createRecordingSink()
  const started = performance.now()
  let committedAt = Number.NaN
  const pending = relay({
    sink,
    pool,
    adapter: openaiChat,
    attempt: upstream.attempt,
    ...(options.name === undefined ? {} : { name: options.name }),
    ...(options.request === undefined ? {} : { request: options.request }),
    hooks: {
      ...options.hooks,
      onCommit: (context) => {
        committedAt = performance.now() - started
        options.hooks?.onCommit?.(context)
      },
    },
    policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY, ...policy },
  })
  await vi.advanceTimersByTimeAsync(options.advanceMs ?? 30_000)
  const outcome = await pending
  return { outcome, sink, upstream, pool, committedAt }
}

afterEach(() => {
  vi.useRealTimers()
})

describe('createHedging options', () => {
  it('rejects a wrong option with an error naming it', () => {
    expect(() => createHedging({ afterMs: 0 })).toThrow(/hedge\.afterMs/)
    expect(() => createHedging({ afterMs: Number.POSITIVE_INFINITY })).toThrow(/hedge\.afterMs/)
    expect(() => createHedging({ afterMs: 'fast' as never })).toThrow(/hedge\.afterMs/)
    expect(() => createHedging({ maxHedges: 0 })).toThrow(/hedge\.maxHedges/)
    expect(() => createHedging({ maxHedges: 1.5 })).toThrow(/hedge\.maxHedges/)
    expect(() => createHedging({ budget: 0 })).toThrow(/hedge\.budget/)
    expect(() => createHedging({ budget: 1.5 })).toThrow(/hedge\.budget/)
    expect(() => createHedging({ budget: 2.5, maxHedges: 2 })).toThrow(/hedge\.budget/)
    expect(() => createHedging({ budgetWindowMs: -1 })).toThrow(/hedge\.budgetWindowMs/)
    expect(() => createHedging({ overloadPauseMs: Number.NaN })).toThrow(/hedge\.overloadPauseMs/)
    expect(() => createHedging({ adaptive: { percentile: 0 } })).toThrow(/percentile/)
    expect(() => createHedging({ adaptive: { warmUp: 300, samples: 200 } })).toThrow(/warmUp/)
    expect(() => createHedging(null as never)).toThrow(TypeError)
  })

  it('policy.hedge must come from createHedging: a plain object is a TypeError before anything is leased', async () => {
    const pool = createMemoryKeyPool(keys('a'))
    const upstream = scriptedUpstream([answer('a', 0)])
    await expect(
      relay({
        sink: createRecordingSink(),
        pool,
        adapter: openaiChat,
        attempt: upstream.attempt,
        policy: { hedge: { afterMs: 100 } as never },
      }),
    ).rejects.toThrow(/createHedging/)
    expect(upstream.calls).toHaveLength(0)
  })

  it('fills in its defaults', () => {
    expect(createHedging().options).toMatchObject({
      afterMs: 'adaptive',
      maxHedges: 1,
      budget: 0.1,
      budgetWindowMs: 60_000,
      overloadPauseMs: 30_000,
      adaptive: { percentile: 0.95, samples: 200, warmUp: 20, initialMs: 2_000, minMs: 100 },
    })
  })
})

describe('hedged attempts', () => {
  it('a stalled attempt is hedged after afterMs on another key; the hedge answers and the stalled one is cancelled at once', async () => {
    useFakeClock()
    const onHedge = vi.fn()
    const { outcome, sink, upstream, committedAt } = await hedged(
      { slow: stall, fast: answer('fast', 50) },
      { hedge: createHedging({ afterMs: 200, budget: 1 }) },
      { hooks: { onHedge } },
    )
    expect(outcome.kind).toBe('committed')
    expect(sink.text).toBe(role + text('fast') + finish)
    if (outcome.kind !== 'committed') return
    expect(outcome.keyId).toBe('fast')
    expect(outcome.hedges).toEqual({
      started: 1,
      cancelled: 1,
      cancelledMs: 250,
      wonByHedge: true,
      skipped: { budget: 0, overload: 0, 'no-free-key': 0 },
    })
    expect(committedAt).toBe(250)
    expect(outcome.attempts.map((a) => [a.attemptNumber, a.keyId, a.result, a.hedgeOf])).toEqual([
      [1, 'slow', 'hedge-lost', undefined],
      [2, 'fast', 'committed', 1],
    ])
    expect(outcome.attempts.map((a) => a.startedMs)).toEqual([0, 200])
    expect(onHedge).toHaveBeenCalledExactlyOnceWith({
      attemptNumber: 2,
      hedgeOf: 1,
      route: 'primary',
      keyId: 'fast',
      afterMs: 200,
    })
    const slow = upstream.calls.find((c) => c.keyId === 'slow')
    expect(slow?.body?.cancelled).toBe(true)
    expect(slow?.signal.aborted).toBe(true)
  })

  it('the first attempt still wins when its output comes first, and the hedge is the one cancelled', async () => {
    useFakeClock()
    const { outcome, sink } = await hedged(
      { a: answer('a', 300), b: answer('b', 500) },
      { hedge: createHedging({ afterMs: 100, budget: 1 }) },
    )
    expect(sink.text).toBe(role + text('a') + finish)
    expect(outcome.kind === 'committed' && outcome.hedges).toEqual({
      started: 1,
      cancelled: 1,
      cancelledMs: 200,
      wonByHedge: false,
      skipped: { budget: 0, overload: 0, 'no-free-key': 0 },
    })
  })

  it('the lease of a cancelled attempt is reported as cancelled: neither a failure nor a success of its key', async () => {
    useFakeClock()
    const { pool } = await hedged(
      { slow: stall, fast: answer('fast', 0) },
      { hedge: createHedging({ afterMs: 100, budget: 1 }) },
    )
    const stats = await pool.stats()
    const slow = stats.find((s) => s.id === 'slow')
    expect(slow?.outcomes).toMatchObject({ cancelled: 1, success: 0, 'server-error': 0 })
    expect(stats.find((s) => s.id === 'fast')?.outcomes).toMatchObject({ success: 1 })
  })

  it('with early headers, headers go out once and content only from the winner', async () => {
    useFakeClock()
    const { sink } = await hedged(
      { slow: stall, fast: answer('fast', 10) },
      { earlyHeaders: true, hedge: createHedging({ afterMs: 100, budget: 1 }) },
    )
    expect(sink.events.filter((e) => e.type === 'head')).toHaveLength(1)
    expect(sink.text).toBe(role + text('fast') + finish)
  })

  it('a failure while another attempt runs goes on with the survivor: no backoff, no retry', async () => {
    useFakeClock()
    const onRetry = vi.fn()
    const { outcome, sink, committedAt } = await hedged(
      { a: status(500, 150), b: answer('b', 200) },
      { hedge: createHedging({ afterMs: 100, budget: 1 }), backoff: { baseMs: 5_000 } },
      { hooks: { onRetry } },
    )
    expect(sink.text).toBe(role + text('b') + finish)
    expect(committedAt).toBe(300)
    expect(onRetry).not.toHaveBeenCalled()
    expect(outcome.attempts.map((a) => a.result)).toEqual(['status-500', 'committed'])
  })

  it('when every running attempt failed the usual retry rules apply, and hedges do not use up maxAttempts', async () => {
    useFakeClock()
    const { outcome, sink } = await hedged(
      { a: [status(500, 150), answer('a2', 0)], b: status(500, 200), c: answer('c', 0) },
      { maxAttempts: 2, hedge: createHedging({ afterMs: 100, budget: 1 }) },
    )
    expect(outcome.kind).toBe('committed')
    // Attempt 1 (a) and its hedge 2 (b) failed; attempt 3 is the second of maxAttempts 2.
    expect(outcome.attempts.map((a) => [a.keyId, a.result])).toEqual([
      ['a', 'status-500'],
      ['b', 'status-500'],
      ['c', 'committed'],
    ])
    expect(sink.text).toBe(role + text('c') + finish)
  })

  it('never hedges on the same key: with one free key there is no hedge', async () => {
    useFakeClock()
    const onHedge = vi.fn()
    const { outcome } = await hedged(
      { only: answer('only', 1_000) },
      { hedge: createHedging({ afterMs: 100, budget: 1 }) },
      { hooks: { onHedge } },
    )
    expect(onHedge).not.toHaveBeenCalled()
    expect(outcome.kind === 'committed' && outcome.hedges?.started).toBe(0)
  })

  it('never hedges a background request, and background requests do not earn budget', async () => {
    useFakeClock()
    const hedging = createHedging({ afterMs: 100, budget: 1 })
    const onHedge = vi.fn()
    await hedged(
      { slow: answer('slow', 1_000), fast: answer('fast', 0) },
      { priority: 'background', hedge: hedging },
      { hooks: { onHedge } },
    )
    expect(onHedge).not.toHaveBeenCalled()
    expect(hedging.snapshot().requests).toBe(0)
  })

  it('the budget holds over its sliding window: at 0.5, one hedge per two requests, earned again as the window moves', async () => {
    useFakeClock()
    const hedging = createHedging({
      afterMs: 100,
      budget: 0.5,
      budgetWindowMs: 10_000,
      minHedgesPerWindow: 0,
    })
    const hedges: number[] = []
    const once = async () => {
      const { outcome } = await hedged(
        { slow: stall, fast: answer('fast', 0) },
        { hedge: hedging, peek: { firstOutputTimeoutMs: 1_000 } },
        { advanceMs: 2_000 },
      )
      hedges.push(outcome.kind === 'committed' ? (outcome.hedges?.started ?? 0) : 0)
    }
    for (let i = 0; i < 4; i++) await once()
    // Request 1: 1 request counted, 0.5 hedge allowed: none; request 2: one hedge (1 ≤ 0.5 × 2).
    expect(hedges).toEqual([0, 1, 0, 1])
    expect(hedging.snapshot()).toMatchObject({ requests: 4, hedges: 2 })
    await vi.advanceTimersByTimeAsync(12_000)
    expect(hedging.snapshot()).toMatchObject({ requests: 0, hedges: 0 })
  })

  it('an overload pauses hedging on the route for overloadPauseMs', async () => {
    useFakeClock()
    const hedging = createHedging({ afterMs: 100, budget: 1, overloadPauseMs: 10_000 })
    const onHedge = vi.fn()
    // The request's first key is overloaded; the retry on another key is not hedged.
    await hedged(
      {
        a: status(429, 0, { 'retry-after': '1' }),
        b: answer('b', 500),
        c: answer('c', 0),
      },
      { hedge: hedging, backoff: { baseMs: 1 } },
      { hooks: { onHedge }, advanceMs: 2_000 },
    )
    expect(onHedge).not.toHaveBeenCalled()
    expect(hedging.snapshot().paused).toEqual(['primary'])
    await vi.advanceTimersByTimeAsync(9_000)
    await hedged(
      { b: answer('b', 500), c: answer('c', 0) },
      { hedge: hedging },
      { hooks: { onHedge }, advanceMs: 1_000 },
    )
    expect(onHedge).toHaveBeenCalledTimes(1)
    expect(hedging.snapshot().paused).toEqual([])
  })

  it('maxHedges bounds the extra attempts: the k-th hedge starts k delays after the first attempt', async () => {
    useFakeClock()
    const onHedge = vi.fn()
    const { outcome } = await hedged(
      { a: stall, b: stall, c: stall, d: answer('d', 0) },
      {
        hedge: createHedging({ afterMs: 100, budget: 2, maxHedges: 2 }),
        peek: { firstOutputTimeoutMs: 1_000 },
        maxAttempts: 1,
      },
      { hooks: { onHedge } },
    )
    expect(onHedge.mock.calls.map(([c]) => c.afterMs)).toEqual([100, 200])
    expect(outcome.kind).toBe('failed')
    expect(outcome.attempts.map((a) => a.keyId)).toEqual(['a', 'b', 'c'])
  })

  it('adaptive: the initial delay until warmUp first outputs, then the route p95 (never under minMs)', async () => {
    useFakeClock()
    const hedging = createHedging({
      afterMs: 'adaptive',
      budget: 1,
      adaptive: { warmUp: 5, samples: 20, initialMs: 700, minMs: 50 },
    })
    expect(hedging.snapshot().delays).toEqual({})
    await warm(hedging, 4)
    expect(hedging.snapshot().delays).toEqual({ 'warm-up': 700 })
    await warm(hedging, 1)
    // Five first outputs at 0 ms: the p95 is 0, floored to minMs.
    expect(hedging.snapshot().delays).toEqual({ 'warm-up': 50 })
    // A route whose first outputs mostly take 300 ms, two in twenty 900 ms: its p95 is 900.
    const slowish = (ms: number) =>
      hedged({ x: answer('x', ms) }, { hedge: hedging }, { name: 'slowish', advanceMs: 1_000 })
    for (let i = 0; i < 20; i++) await slowish(i >= 18 ? 900 : 300)
    expect(hedging.snapshot().delays.slowish).toBe(900)
    // The window slides: twenty more at 300 ms push the slow ones out.
    for (let i = 0; i < 20; i++) await slowish(300)
    expect(hedging.snapshot().delays.slowish).toBe(300)
  })

  it('the non-streaming fallback is never hedged', async () => {
    useFakeClock()
    const onHedge = vi.fn()
    const message = JSON.stringify({
      id: 'x',
      object: 'chat.completion',
      choices: [
        { index: 0, message: { role: 'assistant', content: 'whole' }, finish_reason: 'stop' },
      ],
    })
    const { outcome } = await hedged(
      {
        a: [
          status(404),
          {
            headers: { 'content-type': 'application/json' },
            steps: [{ wait: 1_000 }, { bytes: message }],
          },
        ],
        b: {
          headers: { 'content-type': 'application/json' },
          steps: [{ wait: 1_000 }, { bytes: message }],
        },
      },
      { hedge: createHedging({ afterMs: 100, budget: 1 }), nonStreamingFallback: true },
      {
        hooks: { onHedge },
        request: {
          url: 'https://api.test/v1/chat/completions',
          body: { model: 'm', messages: [], stream: true },
        },
      },
    )
    expect(outcome.kind === 'committed' && outcome.mode).toBe('non-streaming')
    expect(onHedge).not.toHaveBeenCalled()
  })
})

describe('a losing attempt that answers late', () => {
  it('an attempt function that ignores its signal and answers after the winner closed the response is cancelled, not an error (early headers)', async () => {
    useFakeClock()
    const pool = createMemoryKeyPool(keys('a', 'b'))
    const sink = createRecordingSink()
    let closed!: () => void
    const sinkClosed = new Promise<void>((resolve) => {
      closed = resolve
    })
    const close = sink.close.bind(sink)
    sink.close = async () => {
      await close()
      closed()
    }
    const late = scriptedUpstream([answer('late', 0)])
    const first = scriptedUpstream([answer('first', 150)])
    const pending = relay({
      sink,
      pool,
      adapter: openaiChat,
      attempt: async (context) => {
        if (context.attemptNumber === 1) return first.attempt(context)
        // Ignores `context.signal`: answers only once the winner's response is closed.
        await sinkClosed
        return late.attempt(context)
      },
      policy: {
        keepAliveIntervalMs: Number.POSITIVE_INFINITY,
        earlyHeaders: true,
        hedge: createHedging({ afterMs: 100, budget: 1 }),
      },
    })
    await vi.advanceTimersByTimeAsync(1_000)
    const outcome = await pending
    expect(outcome.kind).toBe('committed')
    expect(sink.text).toBe(role + text('first') + finish)
    expect(outcome.attempts.map((a) => a.result)).toEqual(['committed', 'hedge-lost'])
    expect(late.calls[0]?.body?.released).toBe(true)
    const stats = await pool.stats()
    expect(stats.reduce((n, s) => n + s.inflight, 0)).toBe(0)
  })
})

describe('hedging from the first request', () => {
  it('the first request of a fresh gateway at the default budget is hedged (the minimum allowance)', async () => {
    useFakeClock()
    const onHedge = vi.fn()
    const { outcome, sink } = await hedged(
      { a: stall, b: answer('b', 0) },
      { hedge: createHedging({ afterMs: 400 }) },
      { hooks: { onHedge } },
    )
    expect(outcome).toMatchObject({ kind: 'committed', keyId: 'b' })
    expect(onHedge).toHaveBeenCalledTimes(1)
    expect(sink.text).toContain('b')
    expect(outcome.kind === 'committed' && outcome.hedges).toMatchObject({
      started: 1,
      wonByHedge: true,
      skipped: { budget: 0, overload: 0, 'no-free-key': 0 },
    })
  })

  it('past the minimum allowance the proportional budget rules, and a skipped hedge is counted and told with its reason', async () => {
    useFakeClock()
    const hedging = createHedging({ afterMs: 100, minHedgesPerWindow: 0 })
    const onHedgeSkipped = vi.fn()
    const { outcome } = await hedged(
      { a: [stall, answer('a', 0)], b: answer('b', 0) },
      { hedge: hedging, peek: { firstOutputTimeoutMs: 1_000 } },
      { hooks: { onHedgeSkipped } },
    )
    expect(onHedgeSkipped).toHaveBeenCalledWith(
      expect.objectContaining({ reason: 'budget', route: 'primary' }),
    )
    expect(outcome.kind === 'committed' && outcome.hedges?.skipped.budget).toBeGreaterThan(0)
    expect(outcome.kind === 'committed' && outcome.hedges?.started).toBe(0)
  })

  it('one key: no other key is free, so the hedge is skipped as no-free-key; with sameKey it hedges on the same key', async () => {
    useFakeClock()
    const skipped = vi.fn()
    const lone = await hedged(
      { only: [stall, answer('only', 0)] },
      { hedge: createHedging({ afterMs: 100 }), peek: { firstOutputTimeoutMs: 1_000 } },
      { hooks: { onHedgeSkipped: skipped } },
    )
    expect(skipped).toHaveBeenCalledWith(expect.objectContaining({ reason: 'no-free-key' }))
    expect(lone.outcome.kind === 'committed' && lone.outcome.hedges?.started).toBe(0)

    const same = await hedged(
      { only: [stall, answer('only', 0)] },
      { hedge: createHedging({ afterMs: 100, sameKey: true }) },
    )
    expect(same.outcome).toMatchObject({ kind: 'committed', keyId: 'only' })
    expect(same.outcome.kind === 'committed' && same.outcome.hedges).toMatchObject({
      started: 1,
      wonByHedge: true,
    })
    expect(same.upstream.calls.map((call) => call.keyId)).toEqual(['only', 'only'])
    expect(same.upstream.calls[0]?.body?.released).toBe(true)
  })

  it('without a pool: a TypeError unless sameKey, then hedges on the caller’s own credential', async () => {
    useFakeClock()
    const behaviours = [stall, answer('caller', 0)]
    let call = 0
    const attempt = async () => {
      const behaviour = behaviours[Math.min(call++, 1)] as Behaviour
      const body = scriptedBody(behaviour.steps ?? [])
      return new Response(body.stream, { headers: { 'content-type': 'text/event-stream' } })
    }
    await expect(
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt,
        policy: { hedge: createHedging({ afterMs: 100 }) },
      }),
    ).rejects.toThrow(/sameKey/)
    expect(call).toBe(0)
    const pending = relay({
      sink: createRecordingSink(),
      adapter: openaiChat,
      attempt,
      policy: {
        keepAliveIntervalMs: Number.POSITIVE_INFINITY,
        hedge: createHedging({ afterMs: 100, sameKey: true }),
      },
    })
    await vi.advanceTimersByTimeAsync(5_000)
    const outcome = await pending
    expect(outcome).toMatchObject({ kind: 'committed', keyId: null })
    expect(outcome.kind === 'committed' && outcome.hedges?.wonByHedge).toBe(true)
    expect(call).toBe(2)
  })
})
