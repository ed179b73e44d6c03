import { type ChildProcess, fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { PoolKey } from '../../src/index.js'
import { createRedisKeyPool } from '../../src/redis.js'
import {
  connected,
  freshPrefix,
  type RedisServer,
  sleep,
  startRedisServer,
} from './redis-server.js'
import type { AcquireAnswer, ReplicaRequest, StressAnswer } from './replica.js'

const replicaScript = fileURLToPath(new URL('./replica.ts', import.meta.url))
const root = fileURLToPath(new URL('../..', import.meta.url))

/** A gateway replica in its own Node process, sharing the test's Redis. */
interface Replica {
  call(request: ReplicaRequest): Promise<unknown>
  /** Messages the replica's pool sent through `onDegraded`. */
  readonly degraded: string[]
  readonly process: ChildProcess
}

async function spawnReplica(port: number): Promise<Replica> {
  const child = fork(replicaScript, [], {
    cwd: root,
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, REDIS_PORT: String(port) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  })
  // Killed in afterAll even when it never reports ready (a slow, loaded machine).
  spawned.push(child)
  const waiting = new Map<
    number,
    { resolve: (value: unknown) => void; reject: (e: Error) => void }
  >()
  const degraded: string[] = []
  let serial = 0
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error('the replica did not start within 30 s')),
      30_000,
    )
    child.once('exit', (code) => reject(new Error(`the replica exited with ${String(code)}`)))
    child.on(
      'message',
      (message: {
        ready?: true
        id?: number
        result?: unknown
        error?: string
        degraded?: string
      }) => {
        if (message.ready) {
          clearTimeout(timer)
          resolve()
        } else if (message.degraded !== undefined) {
          degraded.push(message.degraded)
        } else if (message.id !== undefined) {
          const call = waiting.get(message.id)
          waiting.delete(message.id)
          if (message.error !== undefined) call?.reject(new Error(message.error))
          else call?.resolve(message.result)
        }
      },
    )
  })
  return {
    process: child,
    degraded,
    call(request) {
      const id = serial++
      return new Promise((resolve, reject) => {
        waiting.set(id, { resolve, reject })
        child.send({ id, request })
      })
    },
  }
}

const keys = (...ids: string[]): PoolKey[] =>
  ids.map((id) => ({ id, secret: `sk-${id}-replica-0123456789` }))

let server: RedisServer
let redis: Redis
let replicas: Replica[] = []
const spawned: ChildProcess[] = []

beforeAll(async () => {
  server = await startRedisServer()
  redis = await connected(server.port)
  replicas = await Promise.all([1, 2, 3, 4].map(() => spawnReplica(server.port)))
}, 40_000)

afterAll(async () => {
  for (const child of spawned) child.kill()
  redis?.disconnect()
  await server?.close()
})

describe('several replicas (separate processes) sharing one Redis', () => {
  it('a 429 or a 401 reported on one replica is seen by the others on their next acquire', async () => {
    const prefix = freshPrefix('replicas')
    const [first, second, third] = replicas as [Replica, Replica, Replica]
    for (const replica of [first, second, third]) {
      await replica.call({ op: 'pool', prefix, keys: keys('a', 'b') })
    }
    const a = (await first.call({ op: 'acquire', prefix })) as AcquireAnswer
    expect(a).toMatchObject({ kind: 'leased', keyId: 'a' })
    if (a.kind !== 'leased') return
    await first.call({
      op: 'report',
      lease: a.lease,
      outcome: { kind: 'rate-limited', retryAfterMs: 60_000 },
    })
    // Round-robin alone would hand `a` out again; the shared cooldown rules it out.
    for (const replica of [second, third, second]) {
      const next = (await replica.call({ op: 'acquire', prefix })) as AcquireAnswer
      expect(next).toMatchObject({ kind: 'leased', keyId: 'b' })
      if (next.kind === 'leased') {
        await replica.call({ op: 'report', lease: next.lease, outcome: { kind: 'success' } })
      }
    }
    const b = (await third.call({ op: 'acquire', prefix })) as AcquireAnswer
    if (b.kind !== 'leased') throw new Error('expected a lease of b')
    await third.call({
      op: 'report',
      lease: b.lease,
      outcome: { kind: 'auth-failed', status: 401 },
    })
    const none = (await first.call({ op: 'acquire', prefix })) as AcquireAnswer
    expect(none.kind).toBe('cooling')
    expect(none.kind === 'cooling' && none.retryInMs).toBeGreaterThan(59_000)
    await second.call({ op: 'enable', prefix, id: 'b' })
    expect(await first.call({ op: 'acquire', prefix })).toMatchObject({
      kind: 'leased',
      keyId: 'b',
    })
  })

  it('maxInflight holds across 4 replicas taking 50 leases each at once', async () => {
    const prefix = freshPrefix('stress')
    const counter = `${prefix}:held`
    for (const replica of replicas) {
      await replica.call({ op: 'pool', prefix, keys: keys('a'), maxInflight: 3 })
    }
    const answers = (await Promise.all(
      replicas.map((replica) =>
        replica.call({ op: 'stress', prefix, leases: 50, holdMs: 6, counter }),
      ),
    )) as StressAnswer[]
    const maxHeld = Math.max(...answers.map((answer) => answer.maxHeld))
    expect(maxHeld).toBeLessThanOrEqual(3)
    // The replicas really contended: the limit was reached and acquires were refused.
    expect(maxHeld).toBeGreaterThanOrEqual(2)
    expect(answers.reduce((sum, answer) => sum + answer.busy, 0)).toBeGreaterThan(0)
    const pool = createRedisKeyPool(keys('a'), { redis, prefix, maxInflight: 3 })
    expect((await pool.stats())[0]).toMatchObject({
      leases: 200,
      inflight: 0,
      outcomes: expect.objectContaining({ success: 200 }),
    })
    for (const replica of replicas) expect(replica.degraded).toEqual([])
  })

  it("reclaims a crashed replica's leases after leaseTtlMs", async () => {
    const prefix = freshPrefix('crash')
    const ttl = 600
    const doomed = await spawnReplica(server.port)
    await doomed.call({ op: 'pool', prefix, keys: keys('a'), maxInflight: 1, leaseTtlMs: ttl })
    expect(await doomed.call({ op: 'acquire', prefix })).toMatchObject({ kind: 'leased' })
    // Let it renew at least once, then kill it without reporting.
    await sleep(ttl / 2)
    const exited = new Promise((resolve) => doomed.process.once('exit', resolve))
    doomed.process.kill('SIGKILL')
    await exited
    const killedAt = Date.now()
    const survivor = createRedisKeyPool(keys('a'), {
      redis,
      prefix,
      maxInflight: 1,
      leaseTtlMs: ttl,
    })
    expect((await survivor.acquire()).kind).toBe('busy')
    let result = await survivor.acquire()
    while (result.kind !== 'leased' && Date.now() - killedAt < ttl * 3) {
      await sleep(20)
      result = await survivor.acquire()
    }
    expect(result.kind).toBe('leased')
    expect(Date.now() - killedAt).toBeLessThanOrEqual(ttl + 400)
    if (result.kind === 'leased') await result.lease.report({ kind: 'success' })
    survivor.close()
  })
})
