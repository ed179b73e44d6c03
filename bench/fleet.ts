/**
 * Key selection against a simulated provider fleet (issue #46), side by side in one run.
 * `createSimulatedFleet` serves 4 keys over HTTP on 127.0.0.1; their request and token
 * buckets hold 1:2:4:8 of the fleet's capacity (per second here: a minute's traffic in a
 * second), hidden from the pool. `relay()` with the default policy and the ready
 * `fetchAttempt()` sends paced load at 80 % of the capacity, `concurrency` at a time, over
 * HTTP or through the fleet's in-process `fetch` (`transport`).
 *
 * Rows: each selection the pools accept (memory pool, then two pools on one Redis as two
 * replicas, requests alternating), a reference told the true limits, the same fleet with bare
 * 429s and with lying headers, and one key in four 3× slower to its first token.
 */

import { spawn, spawnSync } from 'node:child_process'
import { setMaxListeners } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
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
import { createSimulatedFleet, type FleetHeaderMode, type FleetKey } from '../src/testing/index.js'
import { seededRandom } from './inputs.js'

export interface FleetBenchOptions {
  /** Client requests per row. */
  readonly requests: number
  readonly concurrency: number
  /** The fleet's capacity, requests per second (summed over the keys). */
  readonly capacityPerSecond: number
  /** Load as a share of the capacity. */
  readonly load: number
  /** How long a 429 takes. */
  readonly rateLimitedMs: number
  /** Every key's first token (the slow key's is 3×). */
  readonly firstTokenMs: number
  /** Requests of a bare-429 row (it may stall: it is cut at `capMs`). */
  readonly bareRequests: number
  /** No row runs longer: what is still pending then is aborted and counted unfinished. */
  readonly capMs: number
  readonly seed: number
  /**
   * How attempts reach the fleet: over HTTP on 127.0.0.1, or through its in-process `fetch`
   * (no sockets: half the CPU per request, which a busy shared VM may not have to spare).
   */
  readonly transport: 'http' | 'in-process'
}

interface FleetRow {
  readonly scenario: 'honest' | 'bare' | 'lying' | 'slow-key'
  readonly pool: 'memory' | 'redis, 2 replicas'
  readonly selection: string
  readonly requests: number
  /** Upstream 429s per 1,000 client requests. */
  readonly upstream429PerThousand: number
  /** Client requests that did not end in a 200 answer (aborted at the cap not counted). */
  readonly clientErrors: number
  /** Client requests still pending at the cap, or never started by then. */
  readonly unfinished: number
  readonly ttftMeanMs: number
  readonly ttftP50Ms: number
  readonly ttftP95Ms: number
  /** Share of the answers served by the biggest key. */
  readonly biggestShare: number
  /** Answers served over what the fleet could serve in the row's time. */
  readonly capacityServed: number
  readonly seconds: number
}

export interface FleetBenchResult extends FleetBenchOptions {
  /** The biggest key's share of the capacity. */
  readonly biggestCapacityShare: number
  readonly rows: FleetRow[]
  /** Rows left out, and why. */
  readonly skipped: string[]
}

const ratios = [1, 2, 4, 8]
const windowMs = 1000

/** Output budgets of the requests: seeded, 50..350 tokens (mean 200). */
export type Body = { readonly max_tokens: number } & Readonly<Record<string, unknown>>

export function bodies(options: FleetBenchOptions): Body[] {
  const random = seededRandom(options.seed)
  return Array.from({ length: Math.max(options.requests, options.bareRequests) }, (_, i) => ({
    model: 'fleet-model',
    stream: true,
    max_tokens: 50 + Math.floor(random() * 301),
    messages: [{ role: 'user', content: `Request ${i}: tell me about the fox.` }],
  }))
}

/** What a request costs the fleet's token bucket, on average (its input and output budget). */
export const meanCost = (all: readonly Body[]) =>
  all.reduce((sum, body) => sum + Math.ceil(JSON.stringify(body).length / 4) + body.max_tokens, 0) /
  all.length

interface Fleet {
  readonly keys: FleetKey[]
  readonly poolKeys: PoolKey[]
  readonly biggest: string
}

export function fleetOf(
  options: FleetBenchOptions,
  costPerRequest: number,
  headers: FleetHeaderMode,
  slowKey: boolean,
): Fleet {
  const unit = options.capacityPerSecond / ratios.reduce((a, b) => a + b, 0)
  const keys = ratios.map(
    (ratio, i): FleetKey => ({
      id: `k${ratio}`,
      secret: `sk-fleet-${ratio}-not-real`,
      headers,
      ...(slowKey
        ? { firstTokenMs: i === 1 ? options.firstTokenMs * 3 : options.firstTokenMs }
        : {
            firstTokenMs: options.firstTokenMs,
            requestsPerWindow: unit * ratio,
            tokensPerWindow: unit * ratio * costPerRequest,
          }),
    }),
  )
  return {
    keys,
    poolKeys: keys.map(({ id, secret }) => ({ id, secret })),
    biggest: 'k8',
  }
}

export function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}

/**
 * Paced load: request i may start at i / rate (or at `dueMs(i)` after the start), at most
 * `concurrency` at once; cut at `capMs`.
 */
export async function drive(
  options: Pick<FleetBenchOptions, 'capMs' | 'concurrency'>,
  count: number,
  ratePerSecond: number,
  one: (index: number, signal: AbortSignal) => Promise<{ status: number; ttftMs?: number }>,
  dueMs: (index: number) => number = (index) => (index * 1000) / ratePerSecond,
) {
  const cut = new AbortController()
  // Every pending request listens to the cut.
  setMaxListeners(0, cut.signal)
  const timer = setTimeout(() => cut.abort(new Error('the row ran past its cap')), options.capMs)
  const started = performance.now()
  const ttft: number[] = []
  let errors = 0
  let unfinished = 0
  let next = 0
  const worker = async () => {
    for (;;) {
      const index = next++
      if (index >= count) return
      const due = started + dueMs(index)
      const now = performance.now()
      if (due > now) await new Promise((resolve) => setTimeout(resolve, due - now))
      if (cut.signal.aborted) {
        unfinished++
        continue
      }
      try {
        const result = await one(index, cut.signal)
        if (result.status !== 200) {
          if (cut.signal.aborted) unfinished++
          else errors++
        } else if (result.ttftMs !== undefined) ttft.push(result.ttftMs)
      } catch {
        if (cut.signal.aborted) unfinished++
        else errors++
      }
    }
  }
  await Promise.all(Array.from({ length: options.concurrency }, worker))
  clearTimeout(timer)
  return { ttft, errors, unfinished, seconds: (performance.now() - started) / 1000 }
}

/** One client request through `relay()`: its status and time to its first body bytes. */
export async function relayOne(
  pool: KeyPool,
  url: string,
  body: Body,
  attempt: ReturnType<typeof fetchAttempt>,
  signal: AbortSignal,
) {
  const started = performance.now()
  const { sink, response } = webSink()
  const outcome = relay({
    sink,
    pool,
    adapter: openaiChat,
    request: { url, body },
    attempt,
    signal,
  })
  const answer = await response
  let ttftMs: number | undefined
  const reader = answer.body?.getReader()
  if (reader !== undefined) {
    for (let read = await reader.read(); !read.done; read = await reader.read()) {
      ttftMs ??= performance.now() - started
    }
  }
  await outcome
  return {
    status: answer.status,
    ...(answer.status === 200 && ttftMs !== undefined ? { ttftMs } : {}),
  }
}

interface RowSpec {
  readonly scenario: FleetRow['scenario']
  readonly pool: FleetRow['pool']
  readonly selection: string
  /** Makes the row's pools (two for replicas) over the fleet's keys. */
  readonly pools: (keys: PoolKey[]) => KeyPool[]
}

async function runRow(
  options: FleetBenchOptions,
  spec: RowSpec,
  all: readonly Body[],
  costPerRequest: number,
): Promise<FleetRow> {
  const headers = spec.scenario === 'bare' ? 'none' : spec.scenario === 'lying' ? 'lying' : 'honest'
  const fleet = fleetOf(options, costPerRequest, headers, spec.scenario === 'slow-key')
  const upstream = createSimulatedFleet({
    keys: fleet.keys,
    windowMs,
    rateLimitedMs: options.rateLimitedMs,
    frameDelayMs: 2,
  })
  const http = options.transport === 'http'
  const base = http ? await upstream.listen() : 'http://fleet.test'
  const url = `${base}/v1/chat/completions`
  const attempt = fetchAttempt(
    http ? {} : { fetch: (input, init) => upstream.fetch(input, init as RequestInit) },
  )
  const pools = spec.pools(fleet.poolKeys)
  const count = spec.scenario === 'bare' ? options.bareRequests : options.requests
  try {
    const run = await drive(
      options,
      count,
      options.capacityPerSecond * options.load,
      (index, signal) =>
        relayOne(pools[index % pools.length] as KeyPool, url, all[index] as Body, attempt, signal),
    )
    const stats = upstream.stats()
    const served = Object.values(stats).reduce((n, key) => n + key.served, 0)
    const limited = Object.values(stats).reduce((n, key) => n + key.rateLimited, 0)
    const sorted = [...run.ttft].sort((a, b) => a - b)
    return {
      scenario: spec.scenario,
      pool: spec.pool,
      selection: spec.selection,
      requests: count,
      upstream429PerThousand: (1000 * limited) / count,
      clientErrors: run.errors,
      unfinished: run.unfinished,
      ttftMeanMs: sorted.reduce((a, b) => a + b, 0) / sorted.length,
      ttftP50Ms: quantile(sorted, 0.5),
      ttftP95Ms: quantile(sorted, 0.95),
      biggestShare: (stats[fleet.biggest]?.served ?? 0) / served,
      capacityServed: served / (options.capacityPerSecond * run.seconds),
      seconds: run.seconds,
    }
  } finally {
    for (const pool of pools) (pool as { close?: () => void }).close?.()
    await upstream.close()
  }
}

/** Whether `make` accepts the selection (pools throw on one they do not know). */
function accepts(make: () => unknown): boolean {
  try {
    const pool = make() as { close?: () => void }
    pool.close?.()
    return true
  } catch {
    return false
  }
}

interface RedisHandle {
  readonly redis: Redis
  close(): Promise<void>
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

/** A client of `REDIS_URL`, or of a redis-server started here; `undefined` when neither. */
async function startRedis(): Promise<RedisHandle | string> {
  const ready = (redis: Redis) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('Redis not ready within 5 s')), 5000)
      redis.once('ready', () => {
        clearTimeout(timer)
        resolve()
      })
    })
  if (process.env.REDIS_URL !== undefined) {
    const redis = new Redis(process.env.REDIS_URL, { enableOfflineQueue: false })
    redis.on('error', () => {})
    try {
      await ready(redis)
    } catch (error) {
      redis.disconnect()
      return `REDIS_URL unreachable: ${(error as Error).message}`
    }
    return { redis, close: async () => redis.disconnect() }
  }
  const binary = process.env.REDIS_SERVER ?? 'redis-server'
  if (spawnSync(binary, ['--version']).status !== 0) return 'no redis-server installed'
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'stream-boundary-bench-redis-'))
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']
  const child = spawn(binary, [...args, '--dir', dir], { stdio: 'ignore' })
  const redis = new Redis({ host: '127.0.0.1', port, retryStrategy: () => 50 })
  redis.on('error', () => {})
  try {
    await ready(redis)
  } catch (error) {
    redis.disconnect()
    child.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
    return `redis-server did not start: ${(error as Error).message}`
  }
  return {
    redis,
    async close() {
      redis.disconnect()
      await new Promise<void>((resolve) => {
        child.once('exit', () => resolve())
        child.kill('SIGTERM')
      })
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

const selections: readonly KeySelection[] = [
  'round-robin',
  'least-inflight',
  'weighted',
  'headroom',
  'fastest',
]

/** The rows this run can make, with the reasons for those it cannot. */
function plan(redis: Redis | undefined, redisMissing: string | undefined) {
  const probeKeys = [{ id: 'probe', secret: 'sk-probe' }]
  const specs: RowSpec[] = []
  const skipped: string[] = []
  const memory = (selection: KeySelection, weights?: readonly number[]) => (keys: PoolKey[]) => [
    createMemoryKeyPool(
      weights === undefined ? keys : keys.map((key, i) => ({ ...key, weight: weights[i] ?? 1 })),
      { selection },
    ),
  ]
  const accepted = selections.filter((selection) =>
    accepts(() => createMemoryKeyPool(probeKeys, { selection })),
  )
  for (const selection of selections) {
    if (!accepted.includes(selection))
      skipped.push(`memory pool: selection '${selection}' not accepted`)
  }
  for (const selection of accepted) {
    specs.push({ scenario: 'honest', pool: 'memory', selection, pools: memory(selection) })
  }
  specs.push({
    scenario: 'honest',
    pool: 'memory',
    selection: 'reference: weighted, told the true limits',
    pools: memory('weighted', ratios),
  })
  let serial = 0
  const prefix = () => `sb-bench-fleet:${process.pid}:${Date.now().toString(36)}:${serial++}`
  if (redis === undefined) skipped.push(`Redis rows: ${redisMissing}`)
  else {
    for (const selection of accepted) {
      if (!accepts(() => createRedisKeyPool(probeKeys, { redis, prefix: prefix(), selection }))) {
        skipped.push(`Redis pool: selection '${selection}' not accepted`)
        continue
      }
      specs.push({
        scenario: 'honest',
        pool: 'redis, 2 replicas',
        selection,
        pools: (keys) => {
          const shared = prefix()
          return [0, 1].map(() => createRedisKeyPool(keys, { redis, prefix: shared, selection }))
        },
      })
    }
  }
  for (const selection of ['round-robin', 'headroom'] as const) {
    if (accepted.includes(selection))
      specs.push({ scenario: 'bare', pool: 'memory', selection, pools: memory(selection) })
  }
  for (const selection of ['least-inflight', 'headroom'] as const) {
    if (accepted.includes(selection))
      specs.push({ scenario: 'lying', pool: 'memory', selection, pools: memory(selection) })
  }
  for (const selection of ['round-robin', 'fastest'] as const) {
    if (accepted.includes(selection))
      specs.push({ scenario: 'slow-key', pool: 'memory', selection, pools: memory(selection) })
  }
  return { specs, skipped }
}

export async function benchFleet(options: FleetBenchOptions): Promise<FleetBenchResult> {
  const all = bodies(options)
  const cost = meanCost(all)
  const redis = await startRedis()
  const handle = typeof redis === 'string' ? undefined : redis
  const { specs, skipped } = plan(handle?.redis, typeof redis === 'string' ? redis : undefined)
  const rows: FleetRow[] = []
  try {
    for (const spec of specs) rows.push(await runRow(options, spec, all, cost))
  } finally {
    await handle?.close()
  }
  return { ...options, biggestCapacityShare: 8 / 15, rows, skipped }
}

const fmt = (value: number, digits = 0) => (Number.isNaN(value) ? '–' : value.toFixed(digits))
const pct = (value: number) => `${fmt(100 * value)} %`

/** Prints the result as the other benches do: headings and Markdown tables. */
export function printFleet(result: FleetBenchResult): void {
  const honest = result.rows.filter((row) => row.scenario === 'honest')
  const bare = result.rows.filter((row) => row.scenario === 'bare')
  const slow = result.rows.filter((row) => row.scenario === 'slow-key')
  const lying = result.rows.filter((row) => row.scenario === 'lying')
  console.log(
    `\n### Key selection on a simulated fleet (4 keys, request and token buckets 1:2:4:8 per second, honest headers; a 429 takes ${result.rateLimitedMs} ms; ${result.requests} requests at ${pct(result.load)} of ${result.capacityPerSecond} req/s, ${result.concurrency} at a time; relay() with the default policy; attempts ${result.transport === 'http' ? 'over HTTP on 127.0.0.1' : "through the fleet's in-process fetch"})\n`,
  )
  console.log(
    `| pool | selection | upstream 429s per 1,000 requests | client errors | p95 TTFT ms | share of the biggest key (${pct(result.biggestCapacityShare)} of capacity) | capacity served | seconds |`,
  )
  console.log('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |')
  for (const row of honest) {
    console.log(
      `| ${row.pool} | ${row.selection} | ${fmt(row.upstream429PerThousand)} | ${row.clientErrors}${row.unfinished > 0 ? ` (+${row.unfinished} unfinished)` : ''} | ${fmt(row.ttftP95Ms)} | ${pct(row.biggestShare)} | ${pct(row.capacityServed)} | ${fmt(row.seconds, 1)} |`,
    )
  }
  if (bare.length > 0) {
    console.log(
      `\n### The same fleet with bare 429s (no rate-limit headers; ${result.bareRequests} requests, cut at ${fmt(result.capMs / 1000)} s)\n`,
    )
    console.log(
      '| selection | capacity served | upstream 429s per 1,000 | client errors | unfinished at the cut | p95 TTFT ms | seconds |',
    )
    console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for (const row of bare) {
      console.log(
        `| ${row.selection} | ${pct(row.capacityServed)} | ${fmt(row.upstream429PerThousand)} | ${row.clientErrors} | ${row.unfinished} | ${fmt(row.ttftP95Ms)} | ${fmt(row.seconds, 1)} |`,
      )
    }
  }
  if (lying.length > 0) {
    console.log(
      '\n### The same fleet with lying headers (every answer says the key is full and resets at once; a 429 has no retry-after)\n',
    )
    console.log(
      "| selection | upstream 429s per 1,000 | client errors | p95 TTFT ms | biggest key's share | capacity served |",
    )
    console.log('| --- | ---: | ---: | ---: | ---: | ---: |')
    for (const row of lying) {
      console.log(
        `| ${row.selection} | ${fmt(row.upstream429PerThousand)} | ${row.clientErrors}${row.unfinished > 0 ? ` (+${row.unfinished} unfinished)` : ''} | ${fmt(row.ttftP95Ms)} | ${pct(row.biggestShare)} | ${pct(row.capacityServed)} |`,
      )
    }
  }
  if (slow.length > 0) {
    console.log(
      `\n### One key in four 3× slower to its first token (${result.firstTokenMs} ms, one at ${result.firstTokenMs * 3} ms; no limits; ${result.requests} requests)\n`,
    )
    console.log('| selection | mean TTFT ms | p50 | p95 | client errors |')
    console.log('| --- | ---: | ---: | ---: | ---: |')
    for (const row of slow) {
      console.log(
        `| ${row.selection} | ${fmt(row.ttftMeanMs)} | ${fmt(row.ttftP50Ms)} | ${fmt(row.ttftP95Ms)} | ${row.clientErrors} |`,
      )
    }
  }
  for (const reason of result.skipped) console.log(`\nskipped: ${reason}`)
}
