/**
 * A gateway replica in its own process, for the multi-replica tests: one Redis key pool per
 * prefix, driven over IPC by `test/redis/replicas.test.ts`. Run with `node --import tsx`.
 */
import { Redis } from 'ioredis'
import type { KeyLease } from '../../src/advanced.js'
import type { KeyOutcome, PoolKey } from '../../src/index.js'
import { createRedisKeyPool, type RedisKeyPool } from '../../src/redis.js'

export type ReplicaRequest =
  | {
      readonly op: 'pool'
      readonly prefix: string
      readonly keys: readonly PoolKey[]
      readonly maxInflight?: number
      readonly leaseTtlMs?: number
    }
  | { readonly op: 'acquire'; readonly prefix: string }
  | { readonly op: 'report'; readonly lease: number; readonly outcome: KeyOutcome }
  | { readonly op: 'enable'; readonly prefix: string; readonly id: string }
  /** Takes `leases` leases one after another; each is counted in `counter` while held. */
  | {
      readonly op: 'stress'
      readonly prefix: string
      readonly leases: number
      readonly holdMs: number
      readonly counter: string
    }

export type AcquireAnswer =
  | { readonly kind: 'leased'; readonly lease: number; readonly keyId: string }
  | { readonly kind: 'busy'; readonly retryInMs: number | undefined }
  | { readonly kind: 'cooling'; readonly retryInMs: number; readonly rateLimited: boolean }
  | { readonly kind: 'unavailable'; readonly reason: string }

export interface StressAnswer {
  /** The most leases of the pool's key that were held at once, fleet-wide, as this replica saw. */
  readonly maxHeld: number
  /** Acquires answered `busy` because the key was at its limit (each then waited for a slot). */
  readonly busy: number
}

const redis = new Redis({
  host: '127.0.0.1',
  port: Number(process.env.REDIS_PORT),
  enableOfflineQueue: false,
})
redis.on('error', () => {})
await new Promise((resolve) => redis.once('ready', resolve))

const pools = new Map<string, RedisKeyPool>()
const leases = new Map<number, KeyLease>()
let serial = 0
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

function poolOf(prefix: string): RedisKeyPool {
  const pool = pools.get(prefix)
  if (pool === undefined) throw new Error(`no pool ${prefix}`)
  return pool
}

async function handle(request: ReplicaRequest): Promise<unknown> {
  switch (request.op) {
    case 'pool': {
      pools.set(
        request.prefix,
        createRedisKeyPool(request.keys, {
          redis,
          prefix: request.prefix,
          ...(request.maxInflight === undefined ? {} : { maxInflight: request.maxInflight }),
          ...(request.leaseTtlMs === undefined ? {} : { leaseTtlMs: request.leaseTtlMs }),
          onDegraded: (error) => process.send?.({ degraded: error.message }),
        }),
      )
      return null
    }
    case 'acquire': {
      const result = await poolOf(request.prefix).acquire()
      if (result.kind !== 'leased') return result
      const lease = serial++
      leases.set(lease, result.lease)
      return { kind: 'leased', lease, keyId: result.lease.keyId } satisfies AcquireAnswer
    }
    case 'report': {
      await leases.get(request.lease)?.report(request.outcome)
      leases.delete(request.lease)
      return null
    }
    case 'enable':
      await poolOf(request.prefix).enable(request.id)
      return null
    case 'stress': {
      const pool = poolOf(request.prefix)
      let maxHeld = 0
      let busy = 0
      for (let taken = 0; taken < request.leases; ) {
        let result = await pool.acquire()
        // As the relay does: a busy answer is followed by a wait for a released slot.
        if (result.kind === 'busy') {
          busy++
          result = await pool.acquire({ waitMs: 5000 })
        }
        if (result.kind !== 'leased') throw new Error(`no lease: ${JSON.stringify(result)}`)
        taken++
        // Counted after the lease was granted and uncounted before it is reported, so the
        // counter never exceeds the leases really held.
        maxHeld = Math.max(maxHeld, await redis.incr(request.counter))
        await sleep(Math.random() * request.holdMs)
        await redis.decr(request.counter)
        await result.lease.report({ kind: 'success' })
      }
      return { maxHeld, busy } satisfies StressAnswer
    }
  }
}

process.on('message', (message: { id: number; request: ReplicaRequest }) => {
  handle(message.request).then(
    (result) => process.send?.({ id: message.id, result }),
    (error: unknown) => process.send?.({ id: message.id, error: String(error) }),
  )
})
process.send?.({ ready: true })
