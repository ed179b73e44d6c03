/**
 * A relay under test for the HTTP benchmark, run in its own process so its CPU time is its
 * own: `raw` pipes bytes (a typical proxy), `fetch` pipes bytes read with `fetch`, `gateway`
 * is examples/node-http-gateway.ts (its attempts on `node:http`), `gateway-fetch` the same
 * gateway with `fetch` attempts, `gateway-toweb` with `node:http` attempts whose answer is
 * made a web stream again (`new Response(Readable.toWeb(res))`).
 * Prints its URL on IPC, answers `cpu` with `process.cpuUsage()`.
 */

import { Buffer } from 'node:buffer'
import { createServer, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import { nodeFetch, startGateway, type UpstreamClient } from '../examples/node-http-gateway.js'

const modes = ['raw', 'fetch', 'gateway', 'gateway-fetch', 'gateway-toweb'] as const
type Mode = (typeof modes)[number]
const [mode, upstream] = process.argv.slice(2) as [Mode | undefined, string | undefined]
if (upstream === undefined || mode === undefined || !modes.includes(mode)) {
  throw new Error(`usage: http-proxy.ts ${modes.join('|')} <upstream url>`)
}

/** `node:http` attempts whose answer is made a web stream again (`Readable.toWeb`). */
const toWebClient: UpstreamClient = (url, init) =>
  nodeFetch(url, init, (res) => {
    const headers = new Headers()
    for (const [name, value] of Object.entries(res.headers)) {
      if (typeof value === 'string') headers.set(name, value)
    }
    const body = Readable.toWeb(res) as ReadableStream<Uint8Array>
    return new Response(body, { status: res.statusCode ?? 502, headers })
  })

/** A byte pipe that reads the upstream with `fetch` (web streams), as the gateway does. */
async function startFetchPipe(target: string): Promise<string> {
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const answer = await fetch(`${target}${req.url ?? '/'}`, {
      method: req.method ?? 'POST',
      headers: { 'content-type': 'application/json' },
      body: Buffer.concat(chunks),
    })
    res.writeHead(answer.status, {
      'content-type': answer.headers.get('content-type') ?? 'text/event-stream',
    })
    const reader = (answer.body as ReadableStream<Uint8Array>).getReader()
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      if (!res.write(r.value)) await new Promise((resolve) => res.once('drain', resolve))
    }
    res.end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

async function startRaw(target: string): Promise<string> {
  const server = createServer((req, res) => {
    const forward = httpRequest(
      `${target}${req.url ?? '/'}`,
      { method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers)
        answer.pipe(res)
      },
    )
    forward.on('error', () => res.destroy())
    req.pipe(forward)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const url =
  mode === 'raw'
    ? await startRaw(upstream)
    : mode === 'fetch'
      ? await startFetchPipe(upstream)
      : (
          await startGateway({
            openaiBaseUrl: `${upstream}/v1`,
            anthropicBaseUrl: upstream,
            keys: [{ id: 'bench', secret: 'sk-bench-not-real' }],
            policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
            upstreamClient:
              mode === 'gateway' ? 'node:http' : mode === 'gateway-fetch' ? 'fetch' : toWebClient,
          })
        ).url

process.send?.({ url })
process.on('message', (message) => {
  if (message === 'cpu') process.send?.({ cpu: process.cpuUsage() })
  if (message === 'exit') process.exit(0)
})
