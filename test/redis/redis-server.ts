import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis, type RedisOptions } from 'ioredis'
import { afterAll, beforeAll } from 'vitest'
import type { PoolKey } from '../../src/index.js'
import { createRedisKeyPool, type RedisKeyPool, type RedisKeyPoolOptions } from '../../src/redis.js'

/** A real `redis-server` on 127.0.0.1 that a test owns. */
export interface RedisServer {
  readonly port: number
  /** Stops the server (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>
  /** Starts it again on the same port, empty (no persistence). */
  start(): Promise<void>
  /** Stops it for good and removes its scratch directory. */
  close(): Promise<void>
}

const binary = process.env.REDIS_SERVER ?? 'redis-server'

function assertInstalled(): void {
  const probe = spawnSync(binary, ['--version'], { encoding: 'utf8' })
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error('redis-server not found: install it (apt-get install redis-server)')
  }
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

/**
 * Starts `redis-server --port <free> --save '' --appendonly no` on loopback and waits until
 * it accepts connections. Throws (never skips) when redis-server is not installed.
 */
export async function startRedisServer(): Promise<RedisServer> {
  assertInstalled()
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'stream-boundary-redis-'))
  let child: ChildProcess | undefined

  async function start(): Promise<void> {
    const proc = spawn(
      binary,
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    )
    child = proc
    let output = ''
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        proc.kill('SIGKILL')
        reject(new Error(`redis-server did not start on port ${port} within 5 s:\n${output}`))
      }, 5000)
      const onData = (chunk: Buffer) => {
        output += chunk.toString()
        if (output.includes('Ready to accept connections')) {
          clearTimeout(timer)
          proc.stdout?.off('data', onData)
          proc.stdout?.resume()
          resolve()
        }
      }
      proc.stdout?.on('data', onData)
      proc.stderr?.on('data', (chunk: Buffer) => {
        output += chunk.toString()
      })
      proc.once('exit', (code) => {
        clearTimeout(timer)
        reject(new Error(`redis-server exited with ${String(code)} on port ${port}:\n${output}`))
      })
    })
  }

  async function stop(): Promise<void> {
    const proc = child
    child = undefined
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return
    await new Promise<void>((resolve) => {
      proc.once('exit', () => resolve())
      proc.kill('SIGTERM')
    })
  }

  await start()
  return {
    port,
    start,
    stop,
    async close() {
      await stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** An ioredis client for tests: fails fast while disconnected, never logs its errors. */
export function connect(port: number, options: RedisOptions = {}): Redis {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    retryStrategy: () => 50,
    ...options,
  })
  client.on('error', () => {})
  return client
}

let prefixes = 0
/** A prefix no other test uses, so tests sharing a server never see each other's state. */
export function freshPrefix(name = 'test'): string {
  prefixes++
  return `sb-test:${name}:${process.pid}:${Date.now().toString(36)}:${prefixes}`
}

/** {@link connect}, resolved once the client is ready. */
export async function connected(port: number, options: RedisOptions = {}): Promise<Redis> {
  const client = connect(port, options)
  if (client.status !== 'ready') {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no Redis on port ${port}`)), 5000)
      client.once('ready', () => {
        clearTimeout(timer)
        resolve()
      })
    })
  }
  return client
}

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `check` every 20 ms until it returns true, or fails after `timeoutMs`. */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 5000,
  what = 'the condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} did not hold within ${timeoutMs} ms`)
    await sleep(20)
  }
}

/**
 * One redis-server for a test file: started before its tests, stopped after them together
 * with every pool made through `pool()` (each on a fresh prefix).
 */
export function useRedisPools(name: string): {
  pool(
    keys: readonly PoolKey[],
    options?: Omit<RedisKeyPoolOptions, 'redis' | 'prefix'>,
  ): RedisKeyPool
} {
  let server: RedisServer | undefined
  let redis: Redis | undefined
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
  return {
    pool(keys, options = {}) {
      if (redis === undefined) throw new Error('useRedisPools: the server is not started yet')
      const pool = createRedisKeyPool(keys, { ...options, redis, prefix: freshPrefix(name) })
      pools.push(pool)
      return pool
    },
  }
}
