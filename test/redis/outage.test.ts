import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { KeyLease } from '../../src/advanced.js'
import type { PoolKey } from '../../src/index.js'
import {
  createRedisKeyPool,
  type RedisKeyPool,
  type RedisUnavailableError,
} from '../../src/redis.js'
import {
  connected,
  eventually,
  freshPrefix,
  type RedisServer,
  startRedisServer,
} from './redis-server.js'

// This file owns its redis-server: it stops and restarts it.
let server: RedisServer
let redis: Redis
let observer: Redis

beforeAll(async () => {
  server = await startRedisServer()
  redis = await connected(server.port)
  observer = await connected(server.port)
})

afterAll(async () => {
  redis?.disconnect()
  observer?.disconnect()
  await server?.close()
})

const keys = (...ids: string[]): PoolKey[] =>
  ids.map((id) => ({ id, secret: `sk-${id}-outage-0123456789` }))

async function leased(pool: RedisKeyPool, exclude?: string[]): Promise<KeyLease> {
  const result = await pool.acquire(exclude === undefined ? {} : { exclude: new Set(exclude) })
  if (result.kind !== 'leased') throw new Error(`expected a lease, got ${JSON.stringify(result)}`)
  return result.lease
}

function watch() {
  const events: string[] = []
  const errors: RedisUnavailableError[] = []
  return {
    events,
    errors,
    hooks: {
      onDegraded: (error: RedisUnavailableError) => {
        events.push('degraded')
        errors.push(error)
      },
      onRecovered: () => {
        events.push('recovered')
      },
    },
  }
}

describe('Redis going away and coming back', () => {
  it('serves from the local fallback while redis-server is stopped, then pushes the outage back', async () => {
    const prefix = freshPrefix('stopped')
    const { events, errors, hooks } = watch()
    const pool = createRedisKeyPool(keys('a', 'b', 'c'), {
      redis,
      prefix,
      probeIntervalMs: 50,
      ...hooks,
    })
    // Taken from Redis before the outage and still open after it.
    const held = await leased(pool)
    expect(held.keyId).toBe('a')

    await server.stop()
    // The same semantics, locally: an auth failure disables, a 429 cools, disable() holds.
    const b = await leased(pool, ['a', 'c'])
    expect(b.keyId).toBe('b')
    expect(pool.degraded).toBe(true)
    await b.report({ kind: 'auth-failed', status: 401 })
    await pool.disable('c')
    const a = await leased(pool)
    expect(a.keyId).toBe('a')
    await a.report({ kind: 'rate-limited', retryAfterMs: 30_000 })
    const none = await pool.acquire()
    expect(none.kind).toBe('cooling')
    expect(events).toEqual(['degraded'])
    expect(errors[0]?.code).toBe('REDIS_UNAVAILABLE')
    expect(errors[0]?.message).not.toContain('sk-')

    // Restarted empty (no persistence): the local state seeds it.
    await server.start()
    await eventually(
      async () => {
        await pool.stats()
        return events.includes('recovered')
      },
      5000,
      'recovery',
    )
    expect(pool.degraded).toBe(false)
    const tag = `{${prefix}}`
    expect(await observer.hget(`${tag}:s:b`, 'disabled')).toBe('1')
    expect(await observer.hget(`${tag}:s:c`, 'disabled')).toBe('1')
    expect(Number(await observer.hget(`${tag}:s:a`, 'cooldownUntil'))).toBeGreaterThan(
      Date.now() + 25_000,
    )
    // The lease still open on this replica counts in Redis again, until it is reported.
    expect(await observer.zcard(`${tag}:l:a`)).toBe(1)
    await held.report({ kind: 'success' })
    expect(await observer.zcard(`${tag}:l:a`)).toBe(0)
    const stats = await pool.stats()
    expect(stats.map((key) => key.outcomes)).toEqual([
      expect.objectContaining({ success: 1, 'rate-limited': 1 }),
      expect.objectContaining({ 'auth-failed': 1 }),
      expect.objectContaining({ success: 0 }),
    ])

    // Another replica (its own client) sees the outage's decisions.
    const other = await connected(server.port)
    const replica = createRedisKeyPool(keys('a', 'b', 'c'), { redis: other, prefix })
    const answer = await replica.acquire()
    expect(answer.kind).toBe('cooling')
    expect(answer.kind === 'cooling' && answer.retryInMs).toBeGreaterThan(25_000)
    other.disconnect()
    expect(events).toEqual(['degraded', 'recovered'])
  })

  it('treats a Redis that stops answering as down after commandTimeoutMs, and merges back what changed', async () => {
    const prefix = freshPrefix('paused')
    const { events, hooks } = watch()
    const pool = createRedisKeyPool(keys('a', 'b'), {
      redis,
      prefix,
      commandTimeoutMs: 300,
      probeIntervalMs: 50,
      ...hooks,
    })
    const held = await leased(pool)
    expect(held.keyId).toBe('a')

    const admin = await connected(server.port)
    await admin.call('CLIENT', 'PAUSE', '1000', 'ALL')
    admin.disconnect()
    const started = Date.now()
    // This acquire reaches Redis but gets no reply in time: served locally instead.
    const local = await leased(pool)
    expect(Date.now() - started).toBeLessThan(700)
    expect(events).toEqual(['degraded'])
    await held.report({ kind: 'rate-limited', retryAfterMs: 60_000 })
    await local.report({ kind: 'success' })

    await eventually(
      async () => {
        await pool.stats()
        return events.includes('recovered')
      },
      5000,
      'recovery',
    )
    // Redis kept its data: the cooldown is merged in, and no slot leaked, not even the one
    // the timed-out acquire took when Redis finally ran it.
    const tag = `{${prefix}}`
    expect(Number(await observer.hget(`${tag}:s:a`, 'cooldownUntil'))).toBeGreaterThan(
      Date.now() + 55_000,
    )
    expect((await pool.stats()).map((key) => key.inflight)).toEqual([0, 0])
    const next = await leased(pool)
    expect(next.keyId).toBe('b')
    await next.report({ kind: 'success' })
    expect(events).toEqual(['degraded', 'recovered'])
  })

  it('replays, at recovery, outcomes of Redis leases that had no local slot during the outage', async () => {
    const prefix = freshPrefix('replay')
    const { events, hooks } = watch()
    const options = { redis, prefix, probeIntervalMs: 50 }
    const pool = createRedisKeyPool(keys('a', 'b'), { ...options, ...hooks })
    const peer = createRedisKeyPool(keys('a', 'b'), options)
    const held = await leased(pool)
    expect(held.keyId).toBe('a')
    // Another replica disables `a` while this one still holds a lease of it.
    await peer.disable('a')
    expect((await leased(pool)).keyId).toBe('b')

    await server.stop()
    expect(await pool.acquire()).toMatchObject({ kind: 'leased' })
    expect(pool.degraded).toBe(true)
    // `a` is disabled locally too, so the lease has no local slot: its outcome waits for Redis.
    await held.report({ kind: 'server-error', status: 503 })
    await server.start()
    await eventually(
      async () => {
        await pool.stats()
        return events.includes('recovered')
      },
      5000,
      'recovery',
    )
    const tag = `{${prefix}}`
    expect(await observer.hmget(`${tag}:s:a`, 'disabled', 'failures', 'o:server-error')).toEqual([
      '1',
      '1',
      '1',
    ])
    expect(await observer.zcard(`${tag}:l:a`)).toBe(0)
  })
})

describe('an auth failure during an outage', () => {
  const authDisableMs = 400

  it('holds the key for authDisableMs, not until enable(), locally and fleet-wide after recovery, then admits one probe', async () => {
    const prefix = freshPrefix('auth-hold')
    const { events, hooks } = watch()
    let clock = Date.now()
    const now = () => clock
    const options = { redis, prefix, probeIntervalMs: 50, authDisableMs, now }
    const pool = createRedisKeyPool(keys('a'), { ...options, ...hooks })
    const held = await leased(pool)

    // The report is what finds Redis gone: its lease never got a local slot.
    await server.stop()
    await held.report({ kind: 'auth-failed', status: 401 })
    expect(pool.degraded).toBe(true)
    const until = clock + authDisableMs
    // The same timed hold as with Redis up, not an operator hold (disabledUntil 0).
    expect(pool.toJSON().keys[0]).toMatchObject({ disabled: true, disabledUntil: until })
    expect(await pool.acquire()).toEqual({
      kind: 'unavailable',
      reason: 'all-disabled',
      rejectedKeyIds: ['a'],
    })
    expect((await pool.stats())[0]?.outcomes['auth-failed']).toBe(1)

    await server.start()
    // Activity lets the pool notice that Redis is back.
    await eventually(
      async () => {
        await pool.stats()
        return events.includes('recovered')
      },
      5000,
      'recovery',
    )
    const tag = `{${prefix}}`
    expect(
      await observer.hmget(`${tag}:s:a`, 'disabled', 'disabledUntil', 'o:auth-failed'),
    ).toEqual(['1', String(until), '1'])
    expect(await observer.zcard(`${tag}:l:a`)).toBe(0)
    expect(pool.toJSON().keys[0]).toMatchObject({ disabled: true, disabledUntil: until })

    // Another replica (its own client) sees the same timed hold.
    const other = await connected(server.port)
    const replica = createRedisKeyPool(keys('a'), { ...options, redis: other })
    expect(await replica.acquire()).toEqual({
      kind: 'unavailable',
      reason: 'all-disabled',
      rejectedKeyIds: ['a'],
    })
    expect(replica.toJSON().keys[0]).toMatchObject({ disabled: true, disabledUntil: until })

    // After authDisableMs: exactly one probe, whose success re-enables the key everywhere.
    clock += authDisableMs
    const probe = await leased(replica)
    expect(probe.keyId).toBe('a')
    expect(await pool.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
    probe.commit()
    await probe.report({ kind: 'success' })
    expect((await leased(pool)).keyId).toBe('a')
    expect(pool.toJSON().keys[0]).toMatchObject({ disabled: false, disabledUntil: 0 })
    replica.close()
    other.disconnect()
    pool.close()
  })

  it('merges as a report would: an operator hold placed in Redis meanwhile stays, a local enable before the failure wins', async () => {
    const prefix = freshPrefix('auth-operator')
    const { events, hooks } = watch()
    const own = await connected(server.port)
    const options = { prefix, probeIntervalMs: 50, authDisableMs }
    const pool = createRedisKeyPool(keys('a', 'b'), { ...options, redis: own, ...hooks })
    const peer = createRedisKeyPool(keys('a', 'b'), { ...options, redis })
    const held = await leased(pool)
    expect(held.keyId).toBe('a')
    await pool.disable('b')

    // This replica loses Redis; the rest of the fleet does not.
    const ended = new Promise((resolve) => own.once('end', resolve))
    own.disconnect()
    await ended
    await peer.disable('a')
    // Served locally: `held` takes a local slot of `a` and reports through it; `b` is enabled
    // here, then fails auth.
    await pool.enable('b')
    expect(pool.degraded).toBe(true)
    const b = await leased(pool, ['a'])
    expect(b.keyId).toBe('b')
    await b.report({ kind: 'auth-failed', status: 401 })
    await held.report({ kind: 'auth-failed', status: 401 })
    const until = (id: string) => pool.toJSON().keys.find((key) => key.id === id)?.disabledUntil
    expect(until('a')).toBeGreaterThan(0)
    const bUntil = until('b')
    expect(bUntil).toBeGreaterThan(0)

    await own.connect()
    await eventually(
      async () => {
        await pool.stats()
        return events.includes('recovered')
      },
      5000,
      'recovery',
    )
    const tag = `{${prefix}}`
    // `a`: as with Redis up, an auth failure keeps an operator hold (only enable() lifts it).
    expect(await observer.hmget(`${tag}:s:a`, 'disabled', 'disabledUntil')).toEqual(['1', '0'])
    // `b`: the local enable, then the failure's timed hold.
    expect(await observer.hmget(`${tag}:s:b`, 'disabled', 'disabledUntil')).toEqual([
      '1',
      String(bUntil),
    ])
    expect(await peer.acquire()).toEqual({
      kind: 'unavailable',
      reason: 'all-disabled',
      rejectedKeyIds: ['b'],
    })
    pool.close()
    peer.close()
    own.disconnect()
  })
})
