/**
 * What key selection costs as a pool grows (issue #55): 4, 100 and 1,000 keys, the memory
 * pool and the Redis pool, every selection the pools accept, side by side in one run.
 *
 * Two paths per row:
 * - `pool`: acquire, commit and report (a success with stated headroom) straight through the
 *   pool, `concurrency` at a time: the selection's own cost, nothing else.
 * - `relay`: the same through `relay()` to an in-process simulated upstream with as many keys
 *   (no limits, no delays): what a request of a gateway pays.
 *
 * Figures: this process's CPU per request; for the Redis pool also Redis's time per request
 * from its own counters: `INFO commandstats` after `CONFIG RESETSTAT`, summed over the
 * commands the pool sent (counted as this process sends them, so commands a Lua script calls
 * inside Redis are not added twice: the script's own entry holds their time), and Redis's
 * main-thread CPU (`used_cpu_*_main_thread`) per request. Sizes are interleaved round by
 * round and each figure is the median of the rounds.
 */

import { Redis } from 'ioredis'
import {
  createMemoryKeyPool,
  fetchAttempt,
  type KeyPool,
  type KeySelection,
  openaiChat,
  type PoolKey,
  relay,
  webSink,
} from '../src/index.js'
import { createRedisKeyPool } from '../src/redis.js'
import { createSimulatedFleet } from '../src/testing/index.js'
import { startRedisServers } from './redis-servers.js'

export interface FleetScaleOptions {
  /** Pool sizes, smallest first: the ratios are the largest's over the smallest's. */
  readonly sizes: readonly number[]
  /** Requests per round straight through the memory pool. */
  readonly memoryRequests: number
  /** Requests per round straight through the Redis pool. */
  readonly redisRequests: number
  /** Requests per round through relay() (memory and Redis). */
  readonly relayRequests: number
  readonly rounds: number
  /** Requests in flight at once. */
  readonly concurrency: number
}

interface FleetScaleRow {
  readonly pool: 'memory' | 'redis'
  readonly path: 'pool' | 'relay'
  readonly selection: KeySelection
  readonly keys: number
  readonly requests: number
  /** This process's CPU per request (median of the rounds), µs. */
  readonly cpuUsPerRequest: number
  /** Redis's time per request from INFO commandstats (Redis pool only), µs. */
  readonly redisUsPerRequest?: number
  /** Redis's main-thread CPU per request (Redis pool only), µs. */
  readonly redisCpuUsPerRequest?: number
  /** Acquires that leased no key (should be 0). */
  readonly notLeased: number
  /** Redis commands the pool sent per request, by name (Redis pool only, last round). */
  readonly commandsPerRequest?: Readonly<Record<string, number>>
  /** Times the Redis pools of this size and selection fell back to local state (should be 0). */
  readonly degraded?: number
}

export interface FleetScaleResult extends FleetScaleOptions {
  readonly rows: FleetScaleRow[]
  readonly skipped: string[]
}

const selections: readonly KeySelection[] = [
  'round-robin',
  'weighted',
  'least-inflight',
  'headroom',
  'fastest',
]

const stated = {
  requestsRemaining: 10_000,
  requestsResetMs: 1_000,
  tokensRemaining: 1_000_000,
  tokensResetMs: 1_000,
}

/** Counts the commands every ioredis client of this process sends (but `ignored`'s). */
class CommandCounter {
  counts = new Map<string, number>()
  ignored = new Set<unknown>()
  private restore: (() => void) | undefined
  install(): void {
    const proto = Redis.prototype as unknown as {
      sendCommand(this: unknown, command: { name: string }, ...rest: unknown[]): unknown
    }
    const original = proto.sendCommand
    const counter = this
    proto.sendCommand = function (this: unknown, command, ...rest) {
      if (!counter.ignored.has(this)) {
        const name = String(command.name).toLowerCase()
        counter.counts.set(name, (counter.counts.get(name) ?? 0) + 1)
      }
      return original.call(this, command, ...rest)
    }
    this.restore = () => {
      proto.sendCommand = original
    }
  }
  uninstall(): void {
    this.restore?.()
  }
}

function parseInfo(text: string): Map<string, string> {
  const out = new Map<string, string>()
  for (const line of text.split('\r\n')) {
    const at = line.indexOf(':')
    if (at > 0 && !line.startsWith('#')) out.set(line.slice(0, at), line.slice(at + 1))
  }
  return out
}

/** `cmdstat_<name>`: calls and usec per command name. */
function commandStats(text: string): Map<string, { calls: number; usec: number }> {
  const out = new Map<string, { calls: number; usec: number }>()
  for (const [field, value] of parseInfo(text)) {
    if (!field.startsWith('cmdstat_')) continue
    const calls = Number(/calls=(\d+)/.exec(value)?.[1] ?? 0)
    const usec = Number(/usec=(\d+)/.exec(value)?.[1] ?? 0)
    out.set(field.slice('cmdstat_'.length), { calls, usec })
  }
  return out
}

const mainThreadCpuUs = async (admin: Redis) => {
  const info = parseInfo(await admin.info('cpu'))
  const seconds =
    Number(info.get('used_cpu_user_main_thread') ?? info.get('used_cpu_user')) +
    Number(info.get('used_cpu_sys_main_thread') ?? info.get('used_cpu_sys'))
  return seconds * 1e6
}

const cpuNowUs = () => {
  const { user, system } = process.cpuUsage()
  return user + system
}

function keysOf(count: number): PoolKey[] {
  return Array.from({ length: count }, (_, i) => ({
    id: `key-${i}`,
    secret: `sk-scale-${i}-not-real`,
  }))
}

/** `requests` acquire → commit → report cycles, `concurrency` at a time. */
async function drivePool(pool: KeyPool, requests: number, concurrency: number) {
  let next = 0
  let notLeased = 0
  const worker = async () => {
    while (next++ < requests) {
      const acquired = await pool.acquire({ cost: { tokens: 200 } })
      if (acquired.kind !== 'leased') {
        notLeased++
        continue
      }
      acquired.lease.commit()
      await acquired.lease.report({ kind: 'success', headroom: stated })
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  return notLeased
}

/** `requests` client requests through relay() to the in-process upstream. */
function relayDriver(keys: number) {
  const upstream = createSimulatedFleet({
    keys: keysOf(keys).map(({ id, secret }) => ({ id, secret })),
    text: 'Hello there.',
  })
  const attempt = fetchAttempt({
    fetch: (input, init) => upstream.fetch(input, init as RequestInit),
  })
  const body = {
    model: 'fleet-model',
    stream: true,
    max_tokens: 64,
    messages: [{ role: 'user', content: 'Say hello.' }],
  }
  const one = async (pool: KeyPool) => {
    const { sink, response } = webSink()
    const outcome = relay({
      sink,
      pool,
      adapter: openaiChat,
      request: { url: 'http://fleet.test/v1/chat/completions', body },
      attempt,
    })
    const answer = await response
    await answer.arrayBuffer()
    await outcome
    return answer.status === 200
  }
  return {
    async drive(pool: KeyPool, requests: number, concurrency: number) {
      let next = 0
      let failed = 0
      const worker = async () => {
        while (next++ < requests) if (!(await one(pool))) failed++
      }
      await Promise.all(Array.from({ length: concurrency }, worker))
      return failed
    },
    close: () => upstream.close(),
  }
}

interface Sample {
  cpuUs: number
  redisUs?: number
  redisCpuUs?: number
  notLeased: number
  commands?: Record<string, number>
}

const median = (values: readonly number[]) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}

interface RedisContext {
  readonly client: Redis
  readonly admin: Redis
  readonly counter: CommandCounter
}

/** One measured round of one configuration. */
async function measure(
  run: () => Promise<number>,
  requests: number,
  redis: RedisContext | undefined,
): Promise<Sample> {
  ;(globalThis as { gc?: () => void }).gc?.()
  let redisCpuBefore = 0
  if (redis !== undefined) {
    await redis.admin.config('RESETSTAT')
    redisCpuBefore = await mainThreadCpuUs(redis.admin)
    redis.counter.counts.clear()
  }
  const before = cpuNowUs()
  const notLeased = await run()
  const cpuUs = (cpuNowUs() - before) / requests
  if (redis === undefined) return { cpuUs, notLeased }
  const redisCpuUs = ((await mainThreadCpuUs(redis.admin)) - redisCpuBefore) / requests
  const stats = commandStats(await redis.admin.info('commandstats'))
  let usec = 0
  const commands: Record<string, number> = {}
  for (const [name, sent] of redis.counter.counts) {
    commands[name] = sent / requests
    const stat = stats.get(name)
    if (stat === undefined || stat.calls === 0) continue
    // A name also called inside scripts: only the calls sent from here, at its mean time.
    usec += (stat.usec / stat.calls) * Math.min(sent, stat.calls)
  }
  return { cpuUs, redisUs: usec / requests, redisCpuUs, notLeased, commands }
}

interface Config {
  readonly pool: FleetScaleRow['pool']
  readonly path: FleetScaleRow['path']
  readonly selection: KeySelection
  readonly keys: number
  readonly requests: number
  readonly make: () => KeyPool
  readonly samples: Sample[]
  /** Times a Redis pool of this size and selection fell back to its local state. */
  readonly fellBack: { count: number }
}

/** Resolves once the client is ready (rejects after 5 s). */
export function ready(client: { status: string; once(event: string, f: () => void): unknown }) {
  return new Promise<void>((resolve, reject) => {
    if (client.status === 'ready') return resolve()
    const timer = setTimeout(() => reject(new Error('Redis not ready within 5 s')), 5000)
    client.once('ready', () => {
      clearTimeout(timer)
      resolve()
    })
  })
}

function accepts(make: () => unknown): boolean {
  try {
    ;(make() as { close?: () => void }).close?.()
    return true
  } catch {
    return false
  }
}

export async function benchFleetScale(options: FleetScaleOptions): Promise<FleetScaleResult> {
  const skipped: string[] = []
  let servers: Awaited<ReturnType<typeof startRedisServers>> | undefined
  let redis: RedisContext | undefined
  try {
    servers = await startRedisServers()
    const node = servers.nodes[0] as { host: string; port: number }
    const client = new Redis({ host: node.host, port: node.port, enableOfflineQueue: false })
    const admin = new Redis({ host: node.host, port: node.port })
    const counter = new CommandCounter()
    counter.ignored.add(admin)
    redis = { client, admin, counter }
    await Promise.all([client, admin].map(ready))
    counter.install()
  } catch (error) {
    skipped.push(`Redis pool: ${(error as Error).message}`)
    redis?.client.disconnect()
    redis?.admin.disconnect()
    redis = undefined
    await servers?.stop()
    servers = undefined
  }
  const probe = keysOf(1)
  let serial = 0
  const configs: Config[] = []
  for (const selection of selections) {
    if (!accepts(() => createMemoryKeyPool(probe, { selection }))) {
      skipped.push(`memory pool: selection '${selection}' not accepted`)
      continue
    }
    const redisOk =
      redis !== undefined &&
      accepts(() =>
        createRedisKeyPool(probe, { redis: redis.client, prefix: 'sb-scale-probe', selection }),
      )
    if (redis !== undefined && !redisOk)
      skipped.push(`Redis pool: selection '${selection}' not accepted`)
    for (const keys of options.sizes) {
      const memory = () => createMemoryKeyPool(keysOf(keys), { selection })
      const fellBack = { count: 0 }
      const inRedis = () =>
        createRedisKeyPool(keysOf(keys), {
          redis: (redis as RedisContext).client,
          prefix: `sb-scale:${process.pid}:${serial++}`,
          selection,
          // A loaded machine and 1,000 keys make slow scripts: measure them rather than
          // fall back to the local pool (a fallback is counted in the row).
          commandTimeoutMs: 10_000,
          onDegraded: () => {
            fellBack.count++
          },
        })
      const add = (
        pool: Config['pool'],
        path: Config['path'],
        requests: number,
        make: () => KeyPool,
      ) => configs.push({ pool, path, selection, keys, requests, make, samples: [], fellBack })
      add('memory', 'pool', options.memoryRequests, memory)
      add('memory', 'relay', options.relayRequests, memory)
      if (redisOk) {
        add('redis', 'pool', options.redisRequests, inRedis)
        add('redis', 'relay', options.relayRequests, inRedis)
      }
    }
  }
  const drivers = new Map(options.sizes.map((keys) => [keys, relayDriver(keys)]))
  try {
    // One pool per configuration for the whole run (its warm-up learns what it learns).
    const pools = configs.map((config) => config.make())
    const runOf = (config: Config, pool: KeyPool, requests: number) => () =>
      config.path === 'pool'
        ? drivePool(pool, requests, options.concurrency)
        : (drivers.get(config.keys) as ReturnType<typeof relayDriver>).drive(
            pool,
            requests,
            options.concurrency,
          )
    for (const [i, config] of configs.entries()) {
      // Warm-up: the JIT settled and, in memory, every key used at least once (in Redis a
      // quarter of a round: today's pools read every key per acquire, which is slow).
      const pool = pools[i] as KeyPool
      const quarter = Math.ceil(config.requests / 4)
      await runOf(
        config,
        pool,
        config.pool === 'memory' ? Math.max(config.keys, quarter) : quarter,
      )()
    }
    for (let round = 0; round < options.rounds; round++) {
      for (const [i, config] of configs.entries()) {
        const pool = pools[i] as KeyPool
        config.samples.push(
          await measure(
            runOf(config, pool, config.requests),
            config.requests,
            config.pool === 'redis' ? redis : undefined,
          ),
        )
      }
    }
    for (const pool of pools) (pool as { close?: () => void }).close?.()
  } finally {
    for (const driver of drivers.values()) await driver.close()
    redis?.counter.uninstall()
    redis?.client.disconnect()
    redis?.admin.disconnect()
    await servers?.stop()
  }
  const rows = configs.map((config): FleetScaleRow => {
    const of = (pick: (s: Sample) => number | undefined) => {
      const values = config.samples.map(pick).filter((v): v is number => v !== undefined)
      return values.length === 0 ? undefined : median(values)
    }
    const redisUs = of((s) => s.redisUs)
    const redisCpuUs = of((s) => s.redisCpuUs)
    const commands = config.samples.at(-1)?.commands
    return {
      pool: config.pool,
      path: config.path,
      selection: config.selection,
      keys: config.keys,
      requests: config.requests,
      cpuUsPerRequest: of((s) => s.cpuUs) ?? Number.NaN,
      ...(redisUs === undefined ? {} : { redisUsPerRequest: redisUs }),
      ...(redisCpuUs === undefined ? {} : { redisCpuUsPerRequest: redisCpuUs }),
      notLeased: config.samples.reduce((n, s) => n + s.notLeased, 0),
      ...(config.pool === 'redis' ? { degraded: config.fellBack.count } : {}),
      ...(commands === undefined ? {} : { commandsPerRequest: commands }),
    }
  })
  return { ...options, rows, skipped }
}

/** The largest size's figure over the smallest's, per pool, path and selection. */
export function scaleRatios(result: FleetScaleResult) {
  const smallest = result.sizes[0]
  const largest = result.sizes.at(-1)
  const out: {
    pool: FleetScaleRow['pool']
    path: FleetScaleRow['path']
    selection: KeySelection
    cpu: number
    redis?: number
    redisCpu?: number
  }[] = []
  for (const row of result.rows) {
    if (row.keys !== smallest) continue
    const big = result.rows.find(
      (other) =>
        other.keys === largest &&
        other.pool === row.pool &&
        other.path === row.path &&
        other.selection === row.selection,
    )
    if (big === undefined) continue
    const ratio = (a: number | undefined, b: number | undefined) =>
      a === undefined || b === undefined ? undefined : a / b
    const redis = ratio(big.redisUsPerRequest, row.redisUsPerRequest)
    const redisCpu = ratio(big.redisCpuUsPerRequest, row.redisCpuUsPerRequest)
    out.push({
      pool: row.pool,
      path: row.path,
      selection: row.selection,
      cpu: big.cpuUsPerRequest / row.cpuUsPerRequest,
      ...(redis === undefined ? {} : { redis }),
      ...(redisCpu === undefined ? {} : { redisCpu }),
    })
  }
  return out
}

const fmt = (value: number | undefined, digits = 1) =>
  value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits)

export function printFleetScale(result: FleetScaleResult): void {
  const sizes = result.sizes.join(', ')
  console.log(
    `\n### Key selection at scale: ${sizes} keys, memory and Redis pools (straight through the pool: ${result.memoryRequests} / ${result.redisRequests} acquire → commit → report per round; through relay() to an in-process upstream: ${result.relayRequests}; ${result.concurrency} at a time; median of ${result.rounds} rounds)\n`,
  )
  console.log(
    '| pool | path | selection | keys | CPU µs/request | Redis µs/request (commandstats) | Redis main-thread CPU µs/request | Redis commands/request | not leased | fell back to local |',
  )
  console.log('| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |')
  for (const row of result.rows) {
    const commands =
      row.commandsPerRequest === undefined
        ? '–'
        : Object.entries(row.commandsPerRequest)
            .map(([name, n]) => `${name} ${n.toFixed(1)}`)
            .join(', ')
    console.log(
      `| ${row.pool} | ${row.path} | ${row.selection} | ${row.keys} | ${fmt(row.cpuUsPerRequest)} | ${fmt(row.redisUsPerRequest)} | ${fmt(row.redisCpuUsPerRequest)} | ${commands} | ${row.notLeased} | ${row.degraded ?? '–'} |`,
    )
  }
  const smallest = result.sizes[0]
  const largest = result.sizes.at(-1)
  console.log(`\n#### ${largest} keys over ${smallest} keys\n`)
  console.log(
    '| pool | path | selection | CPU | Redis time (commandstats) | Redis main-thread CPU |',
  )
  console.log('| --- | --- | --- | ---: | ---: | ---: |')
  for (const r of scaleRatios(result)) {
    console.log(
      `| ${r.pool} | ${r.path} | ${r.selection} | ${fmt(r.cpu, 2)}× | ${r.redis === undefined ? '–' : `${fmt(r.redis, 2)}×`} | ${r.redisCpu === undefined ? '–' : `${fmt(r.redisCpu, 2)}×`} |`,
    )
  }
  for (const reason of result.skipped) console.log(`\nskipped: ${reason}`)
}
