/**
 * Latency and burst rows of key selection (issue #55), on the simulated fleet of
 * bench/fleet.ts (4 keys, relay() with the default policy, attempts through the fleet's
 * in-process fetch):
 * - one key in four 3× slower to its first token, no limits: `fastest` against round-robin,
 *   at an even pace and in bursts (`burst` requests at once, the same mean rate). Figure: p95
 *   time to first token, and its change against round-robin (target −40 %).
 * - load stepping from 40 % of the fleet's capacity (for `lowMs`) to 120 % (for `highMs`,
 *   5 s at full size; request and token buckets 1:2:4:8, honest headers): `headroom` (memory
 *   pool, and two Redis pools as two replicas) against round-robin. Figure: upstream 429s per 1,000 client
 *   requests, beside client errors and p95 time to first token (what waiting costs).
 */

import { Redis } from 'ioredis'
import { createMemoryKeyPool, fetchAttempt, type KeyPool, type KeySelection } from '../src/index.js'
import { createRedisKeyPool } from '../src/redis.js'
import { createSimulatedFleet } from '../src/testing/index.js'
import {
  type Body,
  bodies,
  drive,
  type FleetBenchOptions,
  fleetOf,
  meanCost,
  quantile,
  relayOne,
} from './fleet.js'
import { ready } from './fleet-scale.js'
import { type RedisServers, startRedisServers } from './redis-servers.js'

export interface FleetLatencyOptions {
  /** Requests of each slow-key row. */
  readonly slowRequests: number
  /** Their mean rate, requests a second. */
  readonly slowRatePerSecond: number
  /** Requests sent at once in a burst. */
  readonly burst: number
  /** The fleet's capacity in the step rows, requests a second. */
  readonly stepCapacityPerSecond: number
  /** How long the step rows' load stays at 40 % of the capacity before the step. */
  readonly lowMs: number
  /** How long it then stays at 120 %. */
  readonly highMs: number
  readonly seed: number
}

export interface FleetLatencyRow {
  readonly scenario: 'slow key, even pace' | 'slow key, bursts' | 'load 40 % → 120 %'
  readonly pool: 'memory' | 'redis, 2 replicas'
  readonly selection: KeySelection
  readonly requests: number
  readonly ttftMeanMs: number
  readonly ttftP95Ms: number
  readonly upstream429PerThousand: number
  /** Share of the answers the slow key served (slow-key rows). */
  readonly slowKeyShare?: number
  readonly clientErrors: number
  readonly unfinished: number
  readonly seconds: number
}

export interface FleetLatencyResult extends FleetLatencyOptions {
  readonly rows: FleetLatencyRow[]
  readonly skipped: string[]
}

/** Start times of the step rows' requests (ms after the start), evenly spaced in each phase. */
function stepSchedule(capacity: number, lowMs: number, highMs: number): number[] {
  const due: number[] = []
  let start = 0
  for (const [share, ms] of [
    [0.4, lowMs],
    [1.2, highMs],
  ] as const) {
    const count = Math.round((capacity * share * ms) / 1000)
    for (let i = 0; i < count; i++) due.push(start + (i * ms) / count)
    start += ms
  }
  return due
}

interface RowInput {
  readonly scenario: FleetLatencyRow['scenario']
  readonly pool: FleetLatencyRow['pool']
  readonly selection: KeySelection
  readonly pools: (keys: Parameters<typeof createMemoryKeyPool>[0]) => KeyPool[]
}

async function runRow(
  options: FleetLatencyOptions,
  input: RowInput,
  base: FleetBenchOptions,
  all: readonly Body[],
  cost: number,
): Promise<FleetLatencyRow> {
  const slow = input.scenario !== 'load 40 % → 120 %'
  const fleet = fleetOf(base, cost, 'honest', slow)
  const upstream = createSimulatedFleet({
    keys: fleet.keys,
    windowMs: 1000,
    rateLimitedMs: base.rateLimitedMs,
    frameDelayMs: 2,
  })
  const attempt = fetchAttempt({
    fetch: (input, init) => upstream.fetch(input, init as RequestInit),
  })
  const url = 'http://fleet.test/v1/chat/completions'
  const pools = input.pools(fleet.poolKeys)
  const schedule = slow
    ? undefined
    : stepSchedule(options.stepCapacityPerSecond, options.lowMs, options.highMs)
  const count = schedule?.length ?? options.slowRequests
  const rate = options.slowRatePerSecond
  const dueMs =
    schedule !== undefined
      ? (i: number) => schedule[i] ?? 0
      : input.scenario === 'slow key, bursts'
        ? (i: number) => (Math.floor(i / options.burst) * options.burst * 1000) / rate
        : (i: number) => (i * 1000) / rate
  try {
    const run = await drive(
      base,
      count,
      rate,
      (index, signal) =>
        relayOne(pools[index % pools.length] as KeyPool, url, all[index] as Body, attempt, signal),
      dueMs,
    )
    const stats = upstream.stats()
    const served = Object.values(stats).reduce((n, key) => n + key.served, 0)
    const limited = Object.values(stats).reduce((n, key) => n + key.rateLimited, 0)
    const sorted = [...run.ttft].sort((a, b) => a - b)
    // fleetOf makes the second key (k2) the slow one.
    const slowId = fleet.keys[1]?.id ?? ''
    return {
      scenario: input.scenario,
      pool: input.pool,
      selection: input.selection,
      requests: count,
      ttftMeanMs: sorted.reduce((a, b) => a + b, 0) / sorted.length,
      ttftP95Ms: quantile(sorted, 0.95),
      upstream429PerThousand: (1000 * limited) / count,
      ...(slow ? { slowKeyShare: (stats[slowId]?.served ?? 0) / served } : {}),
      clientErrors: run.errors,
      unfinished: run.unfinished,
      seconds: run.seconds,
    }
  } finally {
    for (const pool of pools) (pool as { close?: () => void }).close?.()
    await upstream.close()
  }
}

export async function benchFleetLatency(options: FleetLatencyOptions): Promise<FleetLatencyResult> {
  const capacity = options.stepCapacityPerSecond
  const base: FleetBenchOptions = {
    requests: Math.max(
      options.slowRequests,
      Math.ceil((capacity * (options.lowMs + 1.2 * options.highMs)) / 1000) + 10,
    ),
    bareRequests: 0,
    concurrency: Math.max(64, options.burst * 2),
    capacityPerSecond: capacity,
    load: 1,
    rateLimitedMs: 20,
    firstTokenMs: 40,
    capMs: 120_000,
    seed: options.seed,
    transport: 'in-process',
  }
  const all = bodies(base)
  const cost = meanCost(all)
  const memory = (selection: KeySelection) => (keys: Parameters<typeof createMemoryKeyPool>[0]) => [
    createMemoryKeyPool(keys, { selection }),
  ]
  const inputs: RowInput[] = []
  for (const scenario of ['slow key, even pace', 'slow key, bursts'] as const) {
    for (const selection of ['round-robin', 'fastest'] as const)
      inputs.push({ scenario, pool: 'memory', selection, pools: memory(selection) })
  }
  for (const selection of ['round-robin', 'headroom'] as const)
    inputs.push({
      scenario: 'load 40 % → 120 %',
      pool: 'memory',
      selection,
      pools: memory(selection),
    })
  const skipped: string[] = []
  let servers: RedisServers | undefined
  let client: Redis | undefined
  try {
    servers = await startRedisServers()
    const node = servers.nodes[0] as { host: string; port: number }
    client = new Redis({ ...node, enableOfflineQueue: false })
    client.on('error', () => {})
    await ready(client)
    let serial = 0
    const redis = client
    inputs.push({
      scenario: 'load 40 % → 120 %',
      pool: 'redis, 2 replicas',
      selection: 'headroom',
      pools: (keys) => {
        const prefix = `sb-latency:${process.pid}:${serial++}`
        return [0, 1].map(() =>
          createRedisKeyPool(keys, {
            redis,
            prefix,
            selection: 'headroom',
            commandTimeoutMs: 5_000,
          }),
        )
      },
    })
  } catch (error) {
    skipped.push(`Redis rows: ${(error as Error).message}`)
  }
  const rows: FleetLatencyRow[] = []
  try {
    for (const input of inputs) {
      try {
        rows.push(await runRow(options, input, base, all, cost))
      } catch (error) {
        skipped.push(
          `${input.scenario}, ${input.pool}, ${input.selection}: ${(error as Error).message}`,
        )
      }
    }
  } finally {
    client?.disconnect()
    await servers?.stop()
  }
  return { ...options, rows, skipped }
}

/** A row's p95 TTFT change against round-robin in the same scenario (−0.4: 40 % lower). */
export function p95Change(result: FleetLatencyResult, scenario: FleetLatencyRow['scenario']) {
  const of = (selection: KeySelection) =>
    result.rows.find((row) => row.scenario === scenario && row.selection === selection)
  const fastest = of('fastest')
  const roundRobin = of('round-robin')
  return fastest === undefined || roundRobin === undefined
    ? undefined
    : fastest.ttftP95Ms / roundRobin.ttftP95Ms - 1
}

const fmt = (value: number | undefined, digits = 0) =>
  value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits)

export function printFleetLatency(result: FleetLatencyResult): void {
  console.log(
    `\n### Selection under bursts: one key in four 3× slower to its first token (40 ms, one at 120 ms; no limits; ${result.slowRequests} requests at ${result.slowRatePerSecond}/s, evenly or ${result.burst} at once), and load stepping from 40 % of ${result.stepCapacityPerSecond} req/s for ${result.lowMs / 1000} s to 120 % for ${result.highMs / 1000} s (buckets 1:2:4:8, honest headers); relay() in process\n`,
  )
  console.log(
    '| scenario | pool | selection | requests | mean TTFT ms | p95 TTFT ms | p95 vs round-robin | slow key share | upstream 429s per 1,000 | client errors | seconds |',
  )
  console.log('| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
  for (const row of result.rows) {
    const change = row.selection === 'fastest' ? p95Change(result, row.scenario) : undefined
    console.log(
      `| ${row.scenario} | ${row.pool} | ${row.selection} | ${row.requests} | ${fmt(row.ttftMeanMs)} | ${fmt(row.ttftP95Ms)} | ${change === undefined ? '–' : `${fmt(100 * change)} %`} | ${row.slowKeyShare === undefined ? '–' : `${fmt(100 * row.slowKeyShare, 1)} %`} | ${fmt(row.upstream429PerThousand, 1)} | ${row.clientErrors}${row.unfinished > 0 ? ` (+${row.unfinished} unfinished)` : ''} | ${fmt(row.seconds, 1)} |`,
    )
  }
  for (const reason of result.skipped) console.log(`\nskipped: ${reason}`)
}
