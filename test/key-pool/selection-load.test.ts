import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import type { AcquireResult, KeyHeadroom } from '../../src/advanced.js'
import { createMemoryKeyPool, type KeyPool, type KeySelection } from '../../src/index.js'

/** The Park–Miller generator: a fixed seed, the same run every time. */
function generator(seed: number): () => number {
  let state = seed
  return () => {
    state = (state * 48_271) % 2_147_483_647
    return state / 2_147_483_647
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** What one key's upstream answered a request sent at a time. */
interface Answer {
  readonly firstTokenMs: number
  readonly rateLimited: boolean
  readonly retryAfterMs?: number
  readonly headroom?: KeyHeadroom
}

interface Run {
  readonly firstTokens: number[]
  readonly perKey: Record<string, number>
  readonly rateLimited: number
  readonly unserved: number
}

/**
 * Requests arriving at `arrivals` (ms from the start, fake timers), each sent as the relay
 * does: an acquire, and when it answers `busy` with a time, one acquire that waits that long
 * (within `budgetMs`); a 429 is reported with its `retry-after` and counted, an answer is
 * committed at its first token and reported after `streamMs`.
 */
async function simulate(
  selection: KeySelection,
  ids: readonly string[],
  arrivals: readonly number[],
  answer: (keyId: string, now: number) => Answer,
  streamMs: number,
  budgetMs = 5000,
): Promise<Run> {
  const pool: KeyPool = createMemoryKeyPool(
    ids.map((id) => ({ id, secret: `sk-${id}-load-0123456789` })),
    { selection },
  )
  const run = {
    firstTokens: [] as number[],
    perKey: Object.fromEntries(ids.map((id) => [id, 0])),
    rateLimited: 0,
    unserved: 0,
  }
  const request = async () => {
    const started = Date.now()
    let attempts = 0
    while (attempts < 8) {
      const left = budgetMs - (Date.now() - started)
      if (left <= 0) break
      let result: AcquireResult = await pool.acquire()
      if (result.kind === 'busy') {
        result = await pool.acquire({ waitMs: Math.min(result.retryInMs ?? left, left) })
      }
      if (result.kind === 'cooling' && result.retryInMs <= left) {
        await sleep(result.retryInMs)
        continue
      }
      if (result.kind === 'busy') continue
      if (result.kind !== 'leased') break
      attempts++
      const { lease } = result
      run.perKey[lease.keyId] = (run.perKey[lease.keyId] ?? 0) + 1
      const said = answer(lease.keyId, Date.now())
      await sleep(said.firstTokenMs)
      if (said.rateLimited) {
        run.rateLimited++
        await lease.report({
          kind: 'rate-limited',
          retryAfterMs: said.retryAfterMs,
          headroom: said.headroom,
        })
        continue
      }
      lease.commit()
      run.firstTokens.push(Date.now() - started)
      await sleep(streamMs)
      await lease.report({ kind: 'success', headroom: said.headroom })
      return
    }
    run.unserved++
  }
  const done: Promise<void>[] = []
  for (const at of arrivals) setTimeout(() => done.push(request()), at)
  await vi.advanceTimersByTimeAsync(Math.max(...arrivals) + budgetMs + 10 * streamMs)
  await Promise.all(done)
  return run
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number
}

describe('selection under load (simulated upstream, fake timers, fixed seeds)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'], now: 1_000_000 })
  })
  afterEach(() => {
    vi.useRealTimers()
  })

  /** One key in four 3× slower to its first token; bursts of 16 on an even pace. */
  async function slowKey(selection: KeySelection) {
    const random = generator(42)
    const arrivals: number[] = []
    for (let t = 0; t < 8000; t += 25) arrivals.push(t)
    for (let burst = 500; burst < 8000; burst += 1000)
      for (let i = 0; i < 16; i++) arrivals.push(burst)
    const base: Record<string, number> = { a: 40, b: 120, c: 40, d: 40 }
    return simulate(
      selection,
      ['a', 'b', 'c', 'd'],
      arrivals,
      (keyId) => ({
        firstTokenMs: Math.round((base[keyId] as number) * (0.8 + 0.4 * random())),
        rateLimited: false,
      }),
      300,
    )
  }

  it('fastest: with one key 3× slower, under bursts, p95 time to first token is at least 40 % under round-robin and the slow key gets at most 2 % of the requests', async () => {
    const roundRobin = await slowKey('round-robin')
    const fastest = await slowKey('fastest')
    const requests = fastest.firstTokens.length
    expect(requests).toBe(roundRobin.firstTokens.length)
    // Round-robin sends a quarter to the slow key: its p95 is the slow key's.
    expect(percentile(roundRobin.firstTokens, 95)).toBeGreaterThanOrEqual(110)
    expect(percentile(fastest.firstTokens, 95)).toBeLessThanOrEqual(
      0.6 * percentile(roundRobin.firstTokens, 95),
    )
    // Still probed (its estimate is unknown at first and ages), never a real share.
    expect(fastest.perKey.b).toBeGreaterThan(0)
    expect(fastest.perKey.b).toBeLessThanOrEqual(0.02 * requests)
  })

  /**
   * 4 keys of 10 requests a second each (a bucket refilling evenly, stating what is left and
   * when it is full again); load at 40 % of that for 3 s, then 120 % for 5 s.
   */
  async function step(selection: KeySelection) {
    const capacity = 10
    const windowMs = 1000
    const buckets = new Map<string, { level: number; at: number }>()
    const arrivals: number[] = []
    for (let t = 0; t < 3000; t += 1000 / 16) arrivals.push(Math.round(t))
    for (let t = 3000; t < 8000; t += 1000 / 48) arrivals.push(Math.round(t))
    return simulate(
      selection,
      ['a', 'b', 'c', 'd'],
      arrivals,
      (keyId, now) => {
        const bucket = buckets.get(keyId) ?? { level: capacity, at: now }
        bucket.level = Math.min(capacity, bucket.level + ((now - bucket.at) * capacity) / windowMs)
        bucket.at = now
        buckets.set(keyId, bucket)
        const fits = bucket.level >= 1
        if (fits) bucket.level -= 1
        const headroom: KeyHeadroom = {
          requestsRemaining: Math.floor(bucket.level),
          requestsResetMs: Math.ceil(((capacity - bucket.level) * windowMs) / capacity),
        }
        return fits
          ? { firstTokenMs: 50, rateLimited: false, headroom }
          : {
              firstTokenMs: 5,
              rateLimited: true,
              retryAfterMs: Math.ceil(((1 - bucket.level) * windowMs) / capacity),
              headroom,
            }
      },
      200,
    )
  }

  it('headroom: a step to 120 % of capacity waits for the first refill instead of sending into keys predicted empty: no upstream 429, every request served', async () => {
    const roundRobin = await step('round-robin')
    const headroom = await step('headroom')
    // 289 requests; round-robin meets 24 upstream 429s (the rule before this one, which
    // sent into the key that refills first, 82 on this run).
    expect(roundRobin.firstTokens.length).toBe(289)
    expect(roundRobin.rateLimited).toBeGreaterThan(10)
    expect(headroom.rateLimited).toBe(0)
    // Nobody is turned away: every request is served within its budget.
    expect(headroom.firstTokens.length).toBe(289)
    expect(headroom.unserved).toBe(0)
  })
})
