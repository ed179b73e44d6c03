/**
 * A fixed workload for instruction counts and CPU profiles of one relayed request (not part of
 * `npm run bench`): `node profile-request.mjs <mode> <requests>` runs that many 1-frame
 * requests, 8 at a time, after a warm-up of the same size, and exits.
 *
 * - `memory`: `relay()` into a sink that takes every write at once, each attempt answered in
 *   memory (bench/per-request.ts's shape).
 * - `gateway`: the example gateway (`relay()` + `nodeSink`, `node:http` attempts), an upstream
 *   and a client, all in this process.
 * - `raw`: the same with a raw `node:http` byte pipe in the gateway's place.
 * - `direct`: the client straight to the upstream: what the two above share.
 *
 * Under `valgrind --tool=callgrind`, two request counts give instructions per request (the
 * difference over the difference); under `node --cpu-prof`, where they go. Build it as
 * `npm run bench` builds its children (esbuild, no `keepNames`): see docs/performance.md.
 */

import { Agent, createServer, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { startGateway } from '../examples/node-http-gateway.js'
import { createMemoryKeyPool, type DownstreamSink, openaiChat, relay } from '../src/index.js'
import { iterableResponse } from '../src/node.js'
import { openaiChatOneFrame } from './inputs.js'

const [mode = 'memory', count = '1000'] = process.argv.slice(2)
const requests = Number(count)
const answer = openaiChatOneFrame()
const sseHeaders = { 'content-type': 'text/event-stream' }

function nullSink(): DownstreamSink {
  return {
    signal: new AbortController().signal,
    sendHead() {},
    write() {},
    close() {},
    abort() {},
  }
}

async function* once(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  yield bytes
}

const pool = createMemoryKeyPool([{ id: 'bench', secret: 'sk-bench-not-real' }])

function memoryOnce(): Promise<unknown> {
  return relay({
    sink: nullSink(),
    pool,
    adapter: openaiChat,
    policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
    attempt: async () => iterableResponse(once(answer), { headers: sseHeaders }),
  })
}

async function listen(server: ReturnType<typeof createServer>): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

async function startUpstream(): Promise<string> {
  const server = createServer((req, res) => {
    req.resume()
    req.once('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-request-id': 'req_1' })
      res.end(answer)
    })
  })
  return listen(server)
}

async function startRaw(target: string): Promise<string> {
  const agent = new Agent({ keepAlive: true, scheduling: 'lifo' })
  const server = createServer((req, res) => {
    const forward = httpRequest(
      `${target}${req.url ?? '/'}`,
      { method: req.method, headers: req.headers, agent },
      (upstream) => {
        res.writeHead(upstream.statusCode ?? 502, upstream.headers)
        upstream.pipe(res)
      },
    )
    forward.on('error', () => res.destroy())
    req.pipe(forward)
  })
  return listen(server)
}

const body = JSON.stringify({
  model: 'gpt-4o',
  stream: true,
  messages: [{ role: 'user', content: 'Say ok.' }],
})
const clientAgent = new Agent({ keepAlive: true, maxSockets: 8 })

function post(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${url}/v1/chat/completions`,
      {
        method: 'POST',
        agent: clientAgent,
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk-client' },
      },
      (res) => {
        res.on('data', () => {})
        res.once('end', resolve)
        res.once('error', reject)
      },
    )
    req.once('error', reject)
    req.end(body)
  })
}

async function run(once: () => Promise<unknown>, n: number): Promise<void> {
  for (let done = 0; done < n; done += 8) {
    await Promise.all(Array.from({ length: Math.min(8, n - done) }, once))
  }
}

async function main(): Promise<void> {
  if (mode === 'memory') {
    await run(memoryOnce, requests)
    await run(memoryOnce, requests)
    return
  }
  const upstream = await startUpstream()
  const url =
    mode === 'direct'
      ? upstream
      : mode === 'raw'
        ? await startRaw(upstream)
        : (
            await startGateway({
              openaiBaseUrl: `${upstream}/v1`,
              anthropicBaseUrl: upstream,
              keys: [{ id: 'bench', secret: 'sk-bench-not-real' }],
              policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
            })
          ).url
  await run(() => post(url), requests)
  await run(() => post(url), requests)
}

await main()
process.exit(0)
