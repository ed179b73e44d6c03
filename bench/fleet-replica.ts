/**
 * One replica of bench/fleet-replicas.ts, in a process of its own: a Redis pool (on one
 * redis-server or a Redis Cluster) over the fleet's keys, driving acquire → commit → report
 * as fast as it can for the time the parent says, `concurrency` at a time.
 *
 * argv[2]: JSON of {@link ReplicaConfig}. Messages: sends `{ ready: true }` once warmed up, gets
 * `{ go: durationMs }`, sends `{ done: ReplicaResult }` and exits.
 */

import { Cluster, Redis } from 'ioredis'
import type { KeySelection } from '../src/index.js'
import { createRedisKeyPool } from '../src/redis.js'

export interface ReplicaConfig {
  readonly nodes: readonly { host: string; port: number }[]
  readonly cluster: boolean
  readonly prefix: string
  readonly keys: number
  readonly selection: KeySelection
  readonly concurrency: number
}

export interface ReplicaResult {
  /** acquire → report cycles completed through Redis. */
  readonly requests: number
  /** Cycles completed while the pool served from its local fallback (not counted above). */
  readonly localRequests: number
  /** Acquires that leased no key. */
  readonly notLeased: number
  /** Calls that threw. */
  readonly errors: number
  readonly seconds: number
  /** Times the pool fell back to local state (Redis too slow or gone). */
  readonly degraded: number
  /** This process's CPU over the run, ms. */
  readonly cpuMs: number
  readonly firstError?: string
}

const stated = {
  requestsRemaining: 10_000,
  requestsResetMs: 1_000,
  tokensRemaining: 1_000_000,
  tokensResetMs: 1_000,
}

const config = JSON.parse(process.argv[2] ?? '{}') as ReplicaConfig
const client = config.cluster
  ? new Cluster(
      config.nodes.map(({ host, port }) => ({ host, port })),
      {
        enableOfflineQueue: false,
      },
    )
  : new Redis({ ...(config.nodes[0] as { host: string; port: number }), enableOfflineQueue: false })
client.on('error', () => {})
await new Promise<void>((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error('Redis not ready within 10 s')), 10_000)
  client.once('ready', () => {
    clearTimeout(timer)
    resolve()
  })
})
let degraded = 0
const pool = createRedisKeyPool(
  Array.from({ length: config.keys }, (_, i) => ({ id: `key-${i}`, secret: `sk-replica-${i}` })),
  {
    redis: client,
    prefix: config.prefix,
    selection: config.selection,
    commandTimeoutMs: 10_000,
    onDegraded: () => {
      degraded++
    },
  },
)

let requests = 0
let localRequests = 0
let notLeased = 0
let errors = 0
let firstError: string | undefined
async function cycle(): Promise<void> {
  try {
    const local = pool.degraded
    const acquired = await pool.acquire({ cost: { tokens: 200 } })
    if (acquired.kind !== 'leased') {
      notLeased++
      return
    }
    acquired.lease.commit()
    await acquired.lease.report({ kind: 'success', headroom: stated })
    if (local || pool.degraded) localRequests++
    else requests++
  } catch (error) {
    errors++
    firstError ??= (error as Error).message
  }
}

for (let i = 0; i < 5; i++) await cycle()
requests = 0
localRequests = 0
notLeased = 0
errors = 0
process.send?.({ ready: true })
process.once('message', async (message) => {
  const durationMs = (message as { go: number }).go
  const started = performance.now()
  const cpu = process.cpuUsage()
  const until = started + durationMs
  const worker = async () => {
    while (performance.now() < until) await cycle()
  }
  await Promise.all(Array.from({ length: config.concurrency }, worker))
  const used = process.cpuUsage(cpu)
  const result: ReplicaResult = {
    requests,
    localRequests,
    notLeased,
    errors,
    seconds: (performance.now() - started) / 1000,
    degraded,
    cpuMs: (used.user + used.system) / 1000,
    ...(firstError === undefined ? {} : { firstError }),
  }
  pool.close()
  process.send?.({ done: result }, () => {
    client.disconnect()
    process.exit(0)
  })
})
