/**
 * Ten replicas on one Redis (issue #55): `replicas` processes, each with its own ioredis
 * client and Redis pool over the same `keys` keys (one prefix), drive acquire → commit →
 * report as fast as they can for `durationMs`; on one redis-server, then on a Redis Cluster of
 * three masters (bench/redis-servers.ts). Figures: requests a second the Redis side sustained
 * (cycles completed by every replica over the run), and the redis-server processes' CPU over
 * the run from /proc/<pid>/stat (a share of one core; summed over a cluster's nodes).
 */

import type { ChildProcess } from 'node:child_process'
import type { KeySelection } from '../src/index.js'
import { forkChild } from './child.js'
import type { ReplicaConfig, ReplicaResult } from './fleet-replica.js'
import { type RedisServers, startRedisServers } from './redis-servers.js'

export interface FleetReplicasOptions {
  readonly replicas: number
  readonly keys: number
  readonly durationMs: number
  /** Cycles in flight at once in each replica. */
  readonly concurrency: number
  readonly selections: readonly KeySelection[]
}

interface FleetReplicasRow {
  readonly redis: 'one redis-server' | 'Redis Cluster, 3 masters'
  readonly selection: KeySelection
  readonly requestsPerSecond: number
  /** redis-server CPU over the run, as a share of one core (summed over nodes). */
  readonly redisCpuShare: number | undefined
  /** redis-server CPU per request, µs. */
  readonly redisCpuUsPerRequest: number | undefined
  /** The replicas' CPU over the run, as a share of one core (summed). */
  readonly replicasCpuShare: number
  readonly notLeased: number
  readonly errors: number
  readonly degraded: number
  /** Cycles served from a replica's local fallback while Redis was slow (not in requests/s). */
  readonly localRequests: number
  readonly firstError?: string
}

export interface FleetReplicasResult extends FleetReplicasOptions {
  readonly rows: FleetReplicasRow[]
  readonly skipped: string[]
}

function once<T>(child: ChildProcess, pick: (message: unknown) => T | undefined): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: unknown) => {
      const value = pick(message)
      if (value === undefined) return
      child.off('message', onMessage)
      child.off('exit', onExit)
      resolve(value)
    }
    const onExit = (code: number | null) =>
      reject(new Error(`a replica exited with ${code} before it answered`))
    child.on('message', onMessage)
    child.once('exit', onExit)
  })
}

async function runOnce(
  options: FleetReplicasOptions,
  servers: RedisServers,
  selection: KeySelection,
  serial: number,
): Promise<FleetReplicasRow> {
  const config: ReplicaConfig = {
    nodes: servers.nodes.map(({ host, port }) => ({ host, port })),
    cluster: servers.cluster,
    prefix: `sb-replicas:${process.pid}:${serial}`,
    keys: options.keys,
    selection,
    concurrency: options.concurrency,
  }
  const children = Array.from({ length: options.replicas }, () =>
    forkChild('fleet-replica', [JSON.stringify(config)]),
  )
  try {
    await Promise.all(
      children.map((child) =>
        once(child, (m) => ((m as { ready?: boolean }).ready === true ? true : undefined)),
      ),
    )
    const done = children.map((child) => once(child, (m) => (m as { done?: ReplicaResult }).done))
    const cpuBefore = servers.cpuMs()
    const started = performance.now()
    for (const child of children) child.send({ go: options.durationMs })
    const results = await Promise.all(done)
    const wallMs = performance.now() - started
    const cpuAfter = servers.cpuMs()
    const redisCpuMs =
      cpuBefore === undefined || cpuAfter === undefined ? undefined : cpuAfter - cpuBefore
    const requests = results.reduce((n, r) => n + r.requests, 0)
    const firstError = results.find((r) => r.firstError !== undefined)?.firstError
    return {
      redis: servers.cluster ? 'Redis Cluster, 3 masters' : 'one redis-server',
      selection,
      // Each replica's cycles over its own run: they start together and stop together.
      requestsPerSecond: results.reduce((n, r) => n + r.requests / r.seconds, 0),
      redisCpuShare: redisCpuMs === undefined ? undefined : redisCpuMs / wallMs,
      redisCpuUsPerRequest:
        redisCpuMs === undefined || requests === 0 ? undefined : (1000 * redisCpuMs) / requests,
      replicasCpuShare: results.reduce((n, r) => n + r.cpuMs, 0) / wallMs,
      notLeased: results.reduce((n, r) => n + r.notLeased, 0),
      errors: results.reduce((n, r) => n + r.errors, 0),
      degraded: results.reduce((n, r) => n + r.degraded, 0),
      localRequests: results.reduce((n, r) => n + r.localRequests, 0),
      ...(firstError === undefined ? {} : { firstError }),
    }
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL')
  }
}

export async function benchFleetReplicas(
  options: FleetReplicasOptions,
): Promise<FleetReplicasResult> {
  const rows: FleetReplicasRow[] = []
  const skipped: string[] = []
  let serial = 0
  for (const cluster of [false, true]) {
    let servers: RedisServers | undefined
    try {
      servers = await startRedisServers({ cluster, nodes: 3 })
    } catch (error) {
      skipped.push(`${cluster ? 'Redis Cluster' : 'one redis-server'}: ${(error as Error).message}`)
      continue
    }
    try {
      for (const selection of options.selections) {
        try {
          rows.push(await runOnce(options, servers, selection, serial++))
        } catch (error) {
          skipped.push(
            `${cluster ? 'Redis Cluster' : 'one redis-server'}, ${selection}: ${(error as Error).message}`,
          )
        }
      }
    } finally {
      await servers.stop()
    }
  }
  return { ...options, rows, skipped }
}

const fmt = (value: number | undefined, digits = 0) =>
  value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits)

export function printFleetReplicas(result: FleetReplicasResult): void {
  console.log(
    `\n### ${result.replicas} replicas on one Redis: ${result.keys} keys, each replica a process with its own client driving acquire → commit → report, ${result.concurrency} at a time, for ${result.durationMs / 1000} s\n`,
  )
  console.log(
    '| Redis | selection | requests/s | redis-server CPU (cores) | redis-server CPU µs/request | one core ÷ that (req/s, not measured: where Redis would saturate) | replicas CPU (cores) | not leased | errors | fell back to local (times, cycles) |',
  )
  console.log('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
  for (const row of result.rows) {
    console.log(
      `| ${row.redis} | ${row.selection} | ${fmt(row.requestsPerSecond)} | ${fmt(row.redisCpuShare, 2)} | ${fmt(row.redisCpuUsPerRequest)} | ${row.redisCpuUsPerRequest === undefined ? '–' : fmt(1e6 / row.redisCpuUsPerRequest)} | ${fmt(row.replicasCpuShare, 2)} | ${row.notLeased} | ${row.errors} | ${row.degraded}, ${row.localRequests} |`,
    )
    if (row.firstError !== undefined)
      console.log(`\nfirst error (${row.redis}, ${row.selection}): ${row.firstError}`)
  }
  for (const reason of result.skipped) console.log(`\nskipped: ${reason}`)
}
