/**
 * A relay under test for the HTTP benchmark, run in its own process so its CPU time is its
 * own: `raw` pipes bytes (a typical proxy), `fetch` pipes bytes read with `fetch`, `gateway`
 * is examples/node-http-gateway.ts (its attempts on `node:http`), `gateway-fetch` the same
 * gateway with `fetch` attempts, `gateway-toweb` with `node:http` attempts whose answer is
 * made a web stream again (`new Response(Readable.toWeb(res))`). Two more split a gateway's
 * request in parts: `edges` is the example's edges without the relay (the body read and
 * parsed, a `nodeFetch` attempt over its keep-alive agent, the answer piped back) and
 * `relay-memory` the relay alone (`relay()` into `nodeSink`, every attempt answered in memory
 * with a one-frame answer: no upstream request).
 * Prints its URL on IPC, answers `cpu` with `process.cpuUsage()`.
 */

import { Buffer } from 'node:buffer'
import {
  createServer,
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
} from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import { urlToHttpOptions } from 'node:url'
import { startGateway, type UpstreamClient } from '../examples/node-http-gateway.js'
import { createMemoryKeyPool, openaiChat, relay } from '../src/index.js'
import { iterableResponse, nodeSink } from '../src/node.js'
import { openaiChatOneFrame } from './inputs.js'

const modes = [
  'raw',
  'fetch',
  'gateway',
  'gateway-fetch',
  'gateway-toweb',
  'edges',
  'relay-memory',
] as const
type Mode = (typeof modes)[number]
const [mode, upstream] = process.argv.slice(2) as [Mode | undefined, string | undefined]
if (upstream === undefined || mode === undefined || !modes.includes(mode)) {
  throw new Error(`usage: http-proxy.ts ${modes.join('|')} <upstream url>`)
}

// The example gateway's former hand-written node:http client, kept for the `edges` and
// `gateway-toweb` rows (the gateway itself now uses the library's nodeHttpAttempt).
/** The keep-alive agents of {@link nodeFetch}, one per scheme. */
export interface UpstreamAgents {
  readonly http: HttpAgent
  readonly https: HttpsAgent
}

/**
 * Keep-alive agents that reuse the most recently freed connection first (as undici's pool
 * does). They put no cap on connections: an attempt waiting for a socket would wait inside its
 * first-byte clock, and relayed streams each hold one; `maxPendingStreams` bounds the churn.
 */
export function upstreamAgents(): UpstreamAgents {
  const options = { keepAlive: true, scheduling: 'lifo' as const }
  return { http: new HttpAgent(options), https: new HttpsAgent(options) }
}

/** Node's request options of a URL, kept per URL (at most 64): parsing it costs more than the rest of the request's set-up. */
const urlOptions = new Map<string, ReturnType<typeof urlToHttpOptions>>()

function requestOptionsOf(url: string): ReturnType<typeof urlToHttpOptions> {
  let options = urlOptions.get(url)
  if (options === undefined) {
    options = urlToHttpOptions(new URL(url))
    if (urlOptions.size >= 64) urlOptions.clear()
    urlOptions.set(url, options)
  }
  return options
}

/**
 * One upstream request over `node:http` / `node:https`, answered as a `Response` whose body the
 * relay reads as the Node stream it is (`nodeResponse`), with no web stream in between.
 */
export function nodeFetch(
  url: string,
  init: { method: string; headers: Record<string, string>; body: string; signal: AbortSignal },
  answer: (res: IncomingMessage) => Response,
  agents?: UpstreamAgents,
): Promise<Response> {
  return new Promise((resolve, reject) => {
    const secure = url.startsWith('https:')
    const send = secure ? httpsRequest : httpRequest
    const agent = secure ? agents?.https : agents?.http
    const headers = { ...init.headers }
    headers['content-length'] = String(Buffer.byteLength(init.body))
    // The signal by hand: `request({ signal })` also hangs an end-of-stream watcher on the
    // request, which costs more than the rest of this function.
    const { signal } = init
    const abort = () => req.destroy(signal.reason)
    const req = send({ ...requestOptionsOf(url), method: init.method, headers, agent }, (res) => {
      res.once('close', () => signal.removeEventListener('abort', abort))
      resolve(answer(res))
    })
    req.on('error', (error) => {
      signal.removeEventListener('abort', abort)
      reject(error)
    })
    if (signal.aborted) abort()
    else signal.addEventListener('abort', abort, { once: true })
    req.end(init.body)
  })
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

/** The whole body, read as the example gateway reads it (events on the Node stream). */
function bodyOf(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    req.once('error', reject)
  })
}

/** The example gateway's edges without the relay: body read and parsed, one `nodeFetch`, a pipe back. */
async function startEdges(target: string): Promise<string> {
  const agents = upstreamAgents()
  const server = createServer(async (req, res) => {
    const body = await bodyOf(req)
    JSON.parse(body)
    const signal = new AbortController().signal
    const headers = { 'content-type': 'application/json', authorization: 'Bearer sk-bench' }
    const init = { method: 'POST', headers, body, signal }
    await nodeFetch(
      `${target}${req.url ?? '/'}`,
      init,
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, { 'content-type': 'text/event-stream' })
        answer.pipe(res)
        return new Response(null)
      },
      agents,
    )
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** The relay alone over HTTP: `relay()` into `nodeSink`, each attempt answered in memory. */
async function startRelayMemory(): Promise<string> {
  const pool = createMemoryKeyPool([{ id: 'bench', secret: 'sk-bench-not-real' }])
  const answer = openaiChatOneFrame()
  const headers = { 'content-type': 'text/event-stream' }
  async function* frames(): AsyncGenerator<Uint8Array> {
    yield answer
  }
  const server = createServer(async (req, res) => {
    const body = JSON.parse(await bodyOf(req)) as Record<string, unknown>
    await relay({
      sink: nodeSink(res),
      pool,
      adapter: openaiChat,
      policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
      request: { url: 'http://upstream.invalid/v1/chat/completions', body },
      attempt: async () => iterableResponse(frames(), { headers }),
    })
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
      : mode === 'edges'
        ? await startEdges(upstream)
        : mode === 'relay-memory'
          ? await startRelayMemory()
          : (
              await startGateway({
                openaiBaseUrl: `${upstream}/v1`,
                anthropicBaseUrl: upstream,
                keys: [{ id: 'bench', secret: 'sk-bench-not-real' }],
                policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
                upstreamClient:
                  mode === 'gateway'
                    ? 'node:http'
                    : mode === 'gateway-fetch'
                      ? 'fetch'
                      : toWebClient,
              })
            ).url

process.send?.({ url })
process.on('message', (message) => {
  if (message === 'cpu') process.send?.({ cpu: process.cpuUsage() })
  if (message === 'exit') process.exit(0)
})
