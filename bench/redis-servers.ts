/**
 * Throwaway redis-server processes for the benchmarks: one server, or a Redis Cluster of
 * `nodes` masters (`--cluster-enabled yes`, created with `redis-cli --cluster create …
 * --cluster-replicas 0 --cluster-yes`), each on a free loopback port with a temporary
 * directory. `stop()` ends them; whatever is still running when the process exits (an error,
 * Ctrl-C) is killed and its directory removed.
 *
 * Also runnable: `node --import tsx bench/redis-servers.ts cluster 3` starts a cluster, prints
 * its ports as JSON and stops it on Ctrl-C.
 */

import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** One running redis-server. */
export interface RedisServer {
  readonly host: '127.0.0.1'
  readonly port: number
  readonly pid: number
}

/** Servers started here; stopping them is idempotent. */
export interface RedisServers {
  readonly nodes: readonly RedisServer[]
  /** Whether the nodes form a Redis Cluster. */
  readonly cluster: boolean
  /** CPU time (user + system, ms) every node has used so far, from /proc/<pid>/stat. */
  cpuMs(): number | undefined
  stop(): Promise<void>
}

interface Started {
  readonly child: ChildProcess
  readonly dir: string
}

const running = new Set<Started>()
let hooked = false

/** Kills what is still running at exit, synchronously (the only kind of work `exit` allows). */
function hookExit(): void {
  if (hooked) return
  hooked = true
  process.once('exit', () => {
    for (const started of running) {
      started.child.kill('SIGKILL')
      rmSync(started.dir, { recursive: true, force: true })
    }
  })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => process.exit(130))
  }
}

const binary = () => process.env.REDIS_SERVER ?? 'redis-server'

/** Why servers cannot start here, or undefined when they can. */
export function redisMissing(cluster: boolean): string | undefined {
  if (spawnSync(binary(), ['--version']).status !== 0) return 'no redis-server installed'
  if (cluster && spawnSync('redis-cli', ['--version']).status !== 0)
    return 'no redis-cli installed (a cluster is created with redis-cli --cluster create)'
  return undefined
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

/** A free loopback port whose cluster bus port (+10000) is free too. */
async function freePort(taken: Set<number>): Promise<number> {
  for (let tries = 0; tries < 200; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 30_000)
    if (taken.has(port) || taken.has(port + 10_000)) continue
    if ((await portFree(port)) && (await portFree(port + 10_000))) {
      taken.add(port)
      taken.add(port + 10_000)
      return port
    }
  }
  throw new Error('no free loopback port pair found for redis-server')
}

function cpuMsOf(pid: number): number | undefined {
  try {
    // Fields after the command's closing parenthesis: utime is the 14th field, stime the 15th.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const ticks = Number(fields[11]) + Number(fields[12])
    // USER_HZ is 100 on Linux.
    return (ticks * 1000) / 100
  } catch {
    return undefined
  }
}

/** Waits until `redis-cli -p port ping` answers PONG (or fails after `ms`). */
async function waitForPong(port: number, ms = 5000): Promise<void> {
  const until = Date.now() + ms
  for (;;) {
    const ping = spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'ping'], {
      encoding: 'utf8',
    })
    if (ping.stdout?.trim() === 'PONG') return
    if (Date.now() > until) throw new Error(`redis-server on port ${port} did not answer PING`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

async function startOne(port: number, cluster: boolean): Promise<Started & RedisServer> {
  const dir = mkdtempSync(join(tmpdir(), 'stream-boundary-bench-redis-'))
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']
  if (cluster) args.push('--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf')
  const child = spawn(binary(), [...args, '--dir', dir], { stdio: 'ignore' })
  const started = { child, dir }
  running.add(started)
  hookExit()
  if (child.pid === undefined) throw new Error('redis-server did not start')
  return { ...started, host: '127.0.0.1', port, pid: child.pid }
}

async function stopAll(started: readonly Started[]): Promise<void> {
  await Promise.all(
    started.map(
      (one) =>
        new Promise<void>((resolve) => {
          const entry = [...running].find((started) => started.child === one.child)
          if (entry === undefined) return resolve()
          running.delete(entry)
          const done = () => {
            rmSync(one.dir, { recursive: true, force: true })
            resolve()
          }
          if (one.child.exitCode !== null || one.child.signalCode !== null) return done()
          one.child.once('exit', done)
          one.child.kill('SIGTERM')
        }),
    ),
  )
}

/** Waits until every node reports `cluster_state:ok` (slots spread and agreed). */
async function waitForClusterOk(ports: readonly number[], ms = 15_000): Promise<void> {
  const until = Date.now() + ms
  for (;;) {
    const ok = ports.every((port) =>
      spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'cluster', 'info'], {
        encoding: 'utf8',
      }).stdout?.includes('cluster_state:ok'),
    )
    if (ok) return
    if (Date.now() > until) throw new Error('the Redis Cluster did not reach cluster_state:ok')
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/**
 * Starts one redis-server, or (`nodes` > 1 with `cluster`) a Redis Cluster of that many
 * masters. Throws when redis-server (or redis-cli for a cluster) is missing or fails.
 */
export async function startRedisServers(
  options: { readonly cluster?: boolean; readonly nodes?: number } = {},
): Promise<RedisServers> {
  const cluster = options.cluster ?? false
  const count = cluster ? (options.nodes ?? 3) : 1
  const missing = redisMissing(cluster)
  if (missing !== undefined) throw new Error(missing)
  const taken = new Set<number>()
  const nodes: (Started & RedisServer)[] = []
  try {
    for (let i = 0; i < count; i++) nodes.push(await startOne(await freePort(taken), cluster))
    for (const node of nodes) await waitForPong(node.port)
    if (cluster) {
      const create = spawnSync(
        'redis-cli',
        [
          '--cluster',
          'create',
          ...nodes.map((node) => `127.0.0.1:${node.port}`),
          '--cluster-replicas',
          '0',
          '--cluster-yes',
        ],
        { encoding: 'utf8' },
      )
      if (create.status !== 0)
        throw new Error(`redis-cli --cluster create failed: ${create.stderr || create.stdout}`)
      await waitForClusterOk(nodes.map((node) => node.port))
    }
  } catch (error) {
    await stopAll(nodes)
    throw error
  }
  return {
    nodes: nodes.map(({ host, port, pid }) => ({ host, port, pid })),
    cluster,
    cpuMs() {
      let sum = 0
      for (const node of nodes) {
        const ms = cpuMsOf(node.pid)
        if (ms === undefined) return undefined
        sum += ms
      }
      return sum
    },
    stop: () => stopAll(nodes),
  }
}

// `node --import tsx bench/redis-servers.ts [cluster [nodes]]`
// (by the script's name: in the bench's bundle import.meta.url is the runner's own).
if (process.argv[1]?.endsWith('redis-servers.ts')) {
  const cluster = process.argv[2] === 'cluster'
  const servers = await startRedisServers({ cluster, nodes: Number(process.argv[3] ?? 3) })
  console.log(JSON.stringify({ cluster, ports: servers.nodes.map((node) => node.port) }))
  // Ctrl-C: the exit hook stops the servers.
  setInterval(() => {}, 1 << 30)
}
