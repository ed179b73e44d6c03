import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import type { AcquireResult, KeyLease } from '../../src/advanced.js'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  type KeyOutcome,
  type KeySelection,
  type KeyStateEvent,
  openaiChat,
  type PoolKey,
  relay,
} from '../../src/index.js'
import {
  createRedisKeyPool,
  isRedisUnavailableError,
  type RedisKeyPool,
  type RedisKeyPoolOptions,
  redisKeyPoolDefaults,
} from '../../src/redis.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { wireFor } from '../../src/testing/wire.js'
import { describePoolContract } from '../key-pool/pool-contract.js'
import { describeSelectionContract } from '../key-pool/selection-contract.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import {
  connect,
  connected,
  eventually,
  freshPrefix,
  type RedisServer,
  sleep,
  startRedisServer,
} from './redis-server.js'

let server: RedisServer
let redis: Redis
const pools: RedisKeyPool[] = []

beforeAll(async () => {
  server = await startRedisServer()
  redis = await connected(server.port)
})

afterAll(async () => {
  for (const pool of pools) pool.close()
  redis?.disconnect()
  await server?.close()
})

function redisPool(
  keys: readonly PoolKey[],
  options: Omit<RedisKeyPoolOptions, 'redis' | 'prefix'> & { prefix?: string; redis?: Redis } = {},
): RedisKeyPool {
  const pool = createRedisKeyPool(keys, { redis, prefix: freshPrefix(), ...options })
  pools.push(pool)
  return pool
}

const keys = (...ids: string[]): PoolKey[] =>
  ids.map((id) => ({ id, secret: `sk-${id}-secret-0123456789` }))

async function leased(pool: RedisKeyPool, exclude?: string[]): Promise<KeyLease> {
  const result = await pool.acquire(exclude === undefined ? {} : { exclude: new Set(exclude) })
  if (result.kind !== 'leased') throw new Error(`expected a lease, got ${JSON.stringify(result)}`)
  return result.lease
}

describePoolContract('redis pool', async (poolKeys, options) => redisPool(poolKeys, options))
describeSelectionContract('redis pool', async (poolKeys, options) => redisPool(poolKeys, options))

describe('redis pool with Redis unreachable from the start', () => {
  let down: Redis
  let degradedCalls = 0
  beforeAll(async () => {
    const probe = await startRedisServer()
    const port = probe.port
    await probe.close()
    // Nothing listens on this port any more.
    down = connect(port, { retryStrategy: () => null })
  })
  afterAll(() => {
    down.disconnect()
    // Every pool of the shared table went local, once.
    expect(degradedCalls).toBeGreaterThanOrEqual(8)
  })

  const fallback = async (poolKeys: readonly PoolKey[], options: RedisKeyPoolOptions | object) =>
    redisPool(poolKeys, {
      ...options,
      redis: down,
      onDegraded: (error) => {
        degradedCalls++
        expect(isRedisUnavailableError(error)).toBe(true)
      },
    })
  describePoolContract('local fallback', fallback)
  describeSelectionContract('local fallback', fallback)
})

describe('createRedisKeyPool', () => {
  const outcomes: KeyOutcome[] = [
    { kind: 'success' },
    { kind: 'rate-limited' },
    { kind: 'rate-limited', retryAfterMs: 1500 },
    { kind: 'auth-failed', status: 401 },
    { kind: 'server-error', status: 502 },
    { kind: 'server-error', status: 500 },
    { kind: 'server-error' },
    { kind: 'protocol-fault' },
    { kind: 'overloaded' },
    { kind: 'client-gone' },
    { kind: 'rejected' },
    { kind: 'cancelled' },
    { kind: 'server-error', status: 503 },
    { kind: 'server-error', status: 504 },
    { kind: 'rate-limited', retryAfterMs: 0 },
    {
      kind: 'rate-limited',
      headroom: { requestsRemaining: 0, requestsResetMs: 0, tokensRemaining: 0 },
    },
    { kind: 'rate-limited', headroom: { tokensRemaining: 0, tokensResetMs: 1800 } },
    { kind: 'success', headroom: { requestsRemaining: 2, requestsResetMs: 4000 } },
    {
      kind: 'success',
      headroom: {
        requestsRemaining: 9,
        requestsResetMs: 2500,
        tokensRemaining: 700,
        tokensResetMs: 9000,
      },
    },
    { kind: 'success', headroom: { requestsRemaining: 0, requestsResetMs: 1200 } },
    { kind: 'success', headroom: { requestsRemaining: 1e12, tokensRemaining: 1e15 } },
    { kind: 'success', headroom: { requestsRemaining: 5, requestsResetMs: -300 } },
  ]

  function mulberry32(seed: number) {
    let state = seed
    return () => {
      state = (state + 0x6d2b79f5) | 0
      let t = Math.imul(state ^ (state >>> 15), 1 | state)
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296
    }
  }

  const shape = (result: AcquireResult) =>
    result.kind === 'leased' ? { kind: 'leased', keyId: result.lease.keyId } : result

  it.each<[KeySelection, number]>([
    ['round-robin', 5],
    ['weighted', 5],
    ['least-inflight', 5],
    ['headroom', 5],
    ['fastest', 5],
  ])(
    '%s: matches the memory pool step for step, key-state events included (seed %i)',
    async (selection, seed) => {
      let clock = 5_000_000
      const now = () => clock
      const poolKeys: PoolKey[] = [
        { id: 'a', secret: 'sk-a-0123456789', weight: 3 },
        { id: 'b', secret: 'sk-b-0123456789', weight: 1, maxInflight: 2 },
        { id: 'c', secret: 'sk-c-0123456789', weight: 2 },
      ]
      const options = {
        selection,
        maxInflight: 3,
        failureThreshold: 2,
        breakerWindowMs: 6000,
        circuitOpenMs: 4000,
        authDisableMs: 5000,
        defaultCooldownMs: 2500,
        // Stated budgets reset within the walk's clock, so headroom's keys come back.
        headroomHorizonMs: 3000,
        now,
      }
      const told: { memory: KeyStateEvent[]; redis: KeyStateEvent[] } = { memory: [], redis: [] }
      const memory = createMemoryKeyPool(poolKeys, {
        ...options,
        onKeyState: (event) => told.memory.push(event),
      })
      const shared = redisPool(poolKeys, {
        ...options,
        leaseTtlMs: 2_147_483_647, // the longest a timer can wait: no lease expires in the run
        onKeyState: (event) => told.redis.push(event),
      })
      const random = mulberry32(seed)
      const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T
      const open: [KeyLease, KeyLease][] = []
      const kinds = new Set<string>()
      for (let step = 0; step < 600; step++) {
        const roll = random()
        if (roll < 0.05 && open.length > 0) {
          const [expected, actual] = pick(open)
          expected.commit()
          actual.commit()
          kinds.add('commit')
        } else if (roll < 0.45) {
          const exclude = random() < 0.25 ? new Set([pick(['a', 'b', 'c'])]) : undefined
          const cost = pick([undefined, { tokens: 100 }, { tokens: 450 }, {}])
          const expected = await memory.acquire({ exclude, cost })
          const actual = await shared.acquire({ exclude, cost })
          expect(shape(actual), `step ${step}`).toEqual(shape(expected))
          kinds.add(expected.kind)
          if (expected.kind === 'leased' && actual.kind === 'leased') {
            open.push([expected.lease, actual.lease])
          }
        } else if (roll < 0.8 && open.length > 0) {
          const index = Math.floor(random() * open.length)
          const [expected, actual] = open.splice(index, 1)[0] as [KeyLease, KeyLease]
          const outcome = pick(outcomes)
          await expected.report(outcome)
          await actual.report(outcome)
        } else if (roll < 0.84) {
          const id = pick(['a', 'b', 'c'])
          await memory.disable(id)
          await shared.disable(id)
        } else if (roll < 0.9) {
          const id = pick(['a', 'b', 'c'])
          await memory.enable(id)
          await shared.enable(id)
        } else {
          clock += Math.floor(random() * 3000)
        }
        // A commit reaches Redis when the lease is reported, or on the next call.
        await shared.stats()
        expect(shared.toJSON(), `step ${step}`).toEqual(memory.toJSON())
        expect(told.redis, `step ${step}`).toEqual(told.memory)
        for (const key of memory.toJSON().keys) {
          kinds.add(key.circuit)
          if (key.cooldownUntil > clock) kinds.add('cooldown')
          if (key.disabled) kinds.add('disabled')
        }
      }
      expect(await shared.stats()).toEqual(await memory.stats())
      // The walk reached every kind of answer and key state, so the comparison covered them.
      for (const event of told.memory) kinds.add(`${event.state}:${event.reason}`)
      expect([...kinds].sort()).toEqual([
        'busy',
        'circuit-closed:probe-succeeded',
        'circuit-half-open:timer',
        'circuit-open:failure-rate',
        'circuit-open:probe-failed',
        'closed',
        'commit',
        'cooldown',
        'cooling',
        'cooling:rate-limited',
        'disabled',
        'disabled:auth-failed',
        'disabled:operator',
        'enabled:operator',
        'enabled:probe-succeeded',
        'half-open',
        'leased',
        'open',
        'unavailable',
      ])
      expect(shared.degraded).toBe(false)
    },
  )

  it('two pools on one prefix (two replicas) share cooldowns, disables and inflight', async () => {
    const prefix = freshPrefix('shared')
    const first = redisPool(keys('a', 'b'), { prefix, maxInflight: 1 })
    const second = redisPool(keys('a', 'b'), { prefix, maxInflight: 1 })
    const a = await leased(first)
    expect(a.keyId).toBe('a')
    // `a` is at its limit for every replica.
    const b = await leased(second)
    expect(b.keyId).toBe('b')
    expect(await second.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
    await a.report({ kind: 'rate-limited', retryAfterMs: 60_000 })
    await b.report({ kind: 'auth-failed', status: 401 })
    const cooling = await second.acquire()
    expect(cooling.kind).toBe('cooling')
    expect(cooling.kind === 'cooling' && cooling.retryInMs).toBeGreaterThan(59_000)
    await first.enable('b')
    expect((await leased(second)).keyId).toBe('b')
    expect(second.toJSON().keys.find((key) => key.id === 'a')?.cooldownUntil).toBeGreaterThan(0)
  })

  it('a 429 with retry-after-ms: 1e12 cools the key for maxCooldownMs (relay and createResilientFetch)', async () => {
    const poolKeys = keys('a', 'b')
    const answer = (tried: string[], id: string) => {
      tried.push(id)
      return tried.length === 1
        ? new Response('{}', { status: 429, headers: { 'retry-after-ms': '1e12' } })
        : new Response(new TextDecoder().decode(fixtureBytes('openai-chat/text.sse')), {
            headers: { 'content-type': 'text/event-stream' },
          })
    }
    for (const via of ['relay', 'fetch'] as const) {
      const pool = redisPool(poolKeys, { maxCooldownMs: 7_200_000 })
      const tried: string[] = []
      const started = Date.now()
      if (via === 'relay') {
        const outcome = await relay({
          sink: createRecordingSink(),
          pool,
          adapter: openaiChat,
          attempt: async ({ key }) => answer(tried, key.id),
        })
        expect(outcome.kind).toBe('committed')
      } else {
        const fetch = createResilientFetch({
          pool,
          fetch: async (_input, init) => {
            const sent = new Headers(init?.headers).get('authorization') ?? ''
            return answer(tried, poolKeys.find((key) => sent.includes(key.secret))?.id ?? '?')
          },
        })
        const response = await fetch('http://upstream.test/v1/chat/completions', {
          method: 'POST',
          body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
        })
        expect(response.status).toBe(200)
        await response.text()
      }
      expect(tried).toEqual(['a', 'b'])
      const until = pool.toJSON().keys.find((key) => key.id === 'a')?.cooldownUntil ?? 0
      expect(until).toBeGreaterThanOrEqual(started + 7_200_000 - 1000)
      expect(until).toBeLessThanOrEqual(Date.now() + 7_200_000 + 1000)
    }
  })

  it('an attempt silent before output (silence-timeout) rotates the key without cooling it', async () => {
    const pool = redisPool(keys('a', 'b'))
    const w = wireFor(anthropicMessages)
    const tried: string[] = []
    const outcome = await relay({
      sink: createRecordingSink(),
      pool,
      adapter: anthropicMessages,
      policy: { peek: { silenceTimeoutMs: 200 } },
      attempt: async ({ key }) => {
        tried.push(key.id)
        const body =
          tried.length === 1
            ? new ReadableStream<Uint8Array>({
                start(controller) {
                  controller.enqueue(new TextEncoder().encode(w.start().join('')))
                },
              })
            : [...w.start(), ...w.text('Hello'), ...w.finish('stop')].join('')
        return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
      },
    })
    expect(outcome.attempts.map((a) => a.result)).toEqual(['silence-timeout', 'committed'])
    expect(tried).toEqual(['a', 'b'])
    for (const key of pool.toJSON().keys) expect(key.cooldownUntil).toBe(0)
  })

  it('sends only key ids and lease ids to Redis, never a secret', async () => {
    const monitor = await redis.duplicate().monitor()
    const sent: string[] = []
    monitor.on('monitor', (_time: string, args: string[]) => sent.push(...args))
    const poolKeys = keys('a', 'b')
    const pool = redisPool(poolKeys, {
      initialState: createMemoryKeyPool(poolKeys).toJSON(),
    })
    const lease = await leased(pool)
    await lease.report({ kind: 'auth-failed' })
    await pool.disable('b')
    await pool.enable('b')
    await pool.stats()
    await sleep(50)
    monitor.disconnect()
    expect(sent.some((arg) => arg.includes('"release"'))).toBe(true)
    expect(sent.length).toBeGreaterThan(10)
    for (const key of poolKeys) {
      expect(sent.filter((arg) => arg.includes(key.secret))).toEqual([])
    }
    expect(JSON.stringify(pool)).not.toContain('secret')
  })

  it('reads the clock from Redis TIME by default', async () => {
    const pool = redisPool(keys('a'))
    const lease = await leased(pool)
    await lease.report({ kind: 'rate-limited', retryAfterMs: 5000 })
    const [seconds = 0, micros = 0] = (await redis.time()).map(Number)
    const redisNow = seconds * 1000 + Math.floor(micros / 1000)
    const until = pool.toJSON().keys[0]?.cooldownUntil ?? 0
    expect(until).toBeGreaterThan(redisNow + 4000)
    expect(until).toBeLessThanOrEqual(redisNow + 5000)
  })

  it('renews open leases while their replica lives; a lease no one renews expires', async () => {
    const prefix = freshPrefix('ttl')
    const holder = redisPool(keys('a'), { prefix, maxInflight: 1, leaseTtlMs: 600 })
    const other = redisPool(keys('a'), { prefix, maxInflight: 1, leaseTtlMs: 600 })
    const lease = await leased(holder)
    await sleep(1300)
    // Renewed every 200 ms: still held after more than twice its TTL.
    expect((await other.acquire()).kind).toBe('busy')
    holder.close()
    await sleep(800)
    const next = await leased(other)
    expect(next.keyId).toBe('a')
    // The late report still counts its outcome, and frees nothing twice.
    await lease.report({ kind: 'success' })
    expect((await other.stats())[0]).toMatchObject({ inflight: 1, leases: 2 })
  })

  it('puts back an open lease that Redis lost (emptied between two renewals)', async () => {
    const prefix = freshPrefix('lost')
    const leases = `{${prefix}}:l:a`
    const holder = redisPool(keys('a'), { prefix, maxInflight: 1, leaseTtlMs: 600 })
    const lease = await leased(holder)
    await redis.del(leases)
    await eventually(async () => (await redis.zcard(leases)) === 1, 1000, 'the lease to return')
    const other = redisPool(keys('a'), { prefix, maxInflight: 1 })
    expect((await other.acquire()).kind).toBe('busy')
    await lease.report({ kind: 'success' })
    expect(await redis.zcard(leases)).toBe(0)
    expect((await leased(other)).keyId).toBe('a')
  })

  it('frees a half-open trial whose lease expired (its replica crashed)', async () => {
    let clock = 1_000_000
    const now = () => clock
    const prefix = freshPrefix('trial')
    const options = { prefix, now, failureThreshold: 1, circuitOpenMs: 1000, leaseTtlMs: 5000 }
    const crashed = redisPool(keys('a'), options)
    const survivor = redisPool(keys('a'), options)
    await (await leased(crashed)).report({ kind: 'server-error' })
    clock += 1000
    await leased(crashed) // the trial, never reported
    crashed.close()
    expect((await survivor.acquire()).kind).toBe('busy')
    clock += 5000
    expect((await leased(survivor)).keyId).toBe('a')
  })

  it('seeds initialState only for keys Redis does not know yet', async () => {
    const prefix = freshPrefix('seed')
    const first = redisPool(keys('a', 'b'), { prefix })
    await (await leased(first)).report({ kind: 'auth-failed' })
    const snapshot = {
      version: 1 as const,
      keys: [
        {
          id: 'a',
          disabled: false,
          cooldownUntil: 0,
          failures: 0,
          circuit: 'closed' as const,
          circuitUntil: 0,
        },
        {
          id: 'c',
          disabled: true,
          cooldownUntil: 0,
          failures: 0,
          circuit: 'closed' as const,
          circuitUntil: 0,
        },
      ],
    }
    const second = redisPool(keys('a', 'b', 'c'), { prefix, initialState: snapshot })
    // `a` stays disabled (Redis wins); `c` starts disabled (seeded); `b` is the only usable key.
    expect((await leased(second)).keyId).toBe('b')
    expect(second.toJSON().keys.map((key) => key.disabled)).toEqual([true, false, true])
  })

  it('validates its options with exact messages and documents its defaults', () => {
    expect(redisKeyPoolDefaults).toMatchObject({
      leaseTtlMs: 30_000,
      commandTimeoutMs: 500,
      probeIntervalMs: 1000,
      failureThreshold: 5,
      maxCooldownMs: 3_600_000,
    })
    expect(() => createRedisKeyPool([], { redis: {} as Redis, prefix: 'p' })).toThrow(
      'redis must be an ioredis client (new Redis() or new Cluster())',
    )
    expect(() => createRedisKeyPool([], { redis, prefix: '' })).toThrow(
      'prefix must be a non-empty string without { or }, got ',
    )
    expect(() => createRedisKeyPool([], { redis, prefix: 'a{b}' })).toThrow(
      'prefix must be a non-empty string without { or }, got a{b}',
    )
    expect(() => createRedisKeyPool([], { redis, prefix: 'p', leaseTtlMs: 0 })).toThrow(
      'leaseTtlMs must be a positive number of milliseconds up to 2147483647, got 0',
    )
    expect(() =>
      createRedisKeyPool([], { redis, prefix: 'p', commandTimeoutMs: Number.NaN }),
    ).toThrow(
      'commandTimeoutMs must be a positive number of milliseconds up to 2147483647, got NaN',
    )
    // The memory pool's own checks, with its messages; no secret in them.
    expect(() => createRedisKeyPool([], { redis, prefix: 'p', maxCooldownMs: -1 })).toThrow(
      'maxCooldownMs must be a positive number of milliseconds up to 2147483647, got -1',
    )
    expect(() =>
      createRedisKeyPool([{ id: 'a', secret: 'sk-live-abcdef', weight: -1 }], {
        redis,
        prefix: 'p',
      }),
    ).toThrow('weight of key "a" must be a positive number, got -1')
  })

  it('ignores a hook that throws', async () => {
    const onDegraded = vi.fn(() => {
      throw new Error('hook failed')
    })
    const down = connect(1, { retryStrategy: () => null, lazyConnect: true })
    const pool = redisPool(keys('a'), { redis: down, onDegraded })
    expect((await pool.acquire()).kind).toBe('leased')
    expect(onDegraded).toHaveBeenCalledTimes(1)
    expect(pool.degraded).toBe(true)
    down.disconnect()
  })
})
