/**
 * The ready attempt on each transport, side by side in one process: `relay()` into a sink that
 * takes every write, its attempts sent to a local upstream running in a process of its own (so
 * the CPU measured here is the relay's and its transport's only), over `nodeHttpAttempt`
 * (keep-alive agent), undici's dispatcher API (`Agent.request`, the undici package: a dev
 * dependency, for this bench only), undici's own `fetch`, and `fetchAttempt` (the runtime's
 * `fetch`). CPU per request with 1-frame answers and per frame with 200-frame answers; then
 * what each option of a fetch attempt costs (the same request, one option changed); then the
 * client's bytes sent as they came against the same body serialised again, for a large request.
 * Rounds interleaved in a rotating order, medians reported.
 */

import { spawn } from 'node:child_process'
import { Agent, fetch as undiciFetch } from 'undici'
import {
  createMemoryKeyPool,
  type DownstreamSink,
  fetchAttempt,
  openaiChat,
  readClientRequest,
  relay,
} from '../src/index.js'
import { nodeHttpAttempt } from '../src/node.js'
import {
  type AttemptRequestContext,
  attemptRequest,
  type ReadyAttempt,
} from '../src/retry/request/ready-attempt.js'
import { iterableResponse } from '../src/sse/sources.js'
import { openaiChatOneFrame, openaiChatStream } from './inputs.js'

interface TransportSide {
  readonly name: string
  /** CPU µs per request, 1-frame answers (median of rounds). */
  readonly cpuUsPerRequest: number
  /** CPU µs per frame, 200-frame answers (median of rounds); absent for the option rows. */
  readonly cpuUsPerFrame?: number
}

export interface TransportsResult {
  readonly requests: number
  readonly framesPerStream: number
  readonly rounds: number
  /** The ready attempt on each transport; `× node:http` is each against the first. */
  readonly transports: readonly TransportSide[]
  /** A fetch attempt with one option changed, against `fetchAttempt()` as it ships. */
  readonly fetchOptions: readonly TransportSide[]
  /** A large request (the body's size in bytes): re-serialised against the client's bytes. */
  readonly requestBytes: { readonly bodyBytes: number; readonly sides: readonly TransportSide[] }
}

// The upstream: POST /1 answers one frame, /many the seeded stream, one frame per write (the
// next one once the last was handed to the socket), after reading the request to its end.
// Its own process, so its CPU is not counted here.
const upstreamSource = `
const { createServer } = require('node:http')
process.once('message', ({ one, many }) => {
  const single = Buffer.from(one, 'base64')
  const frames = Buffer.from(many, 'base64').toString().split('\\n\\n').filter(Boolean).map((f) => Buffer.from(f + '\\n\\n'))
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      if (req.url !== '/many') return void res.end(single)
      let index = 0
      const next = () => (index < frames.length ? res.write(frames[index++], () => setImmediate(next)) : res.end())
      next()
    })
  })
  server.keepAliveTimeout = 60_000
  server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }))
  process.on('disconnect', () => process.exit(0))
})
`

async function startUpstream(frames: number) {
  const child = spawn(process.execPath, ['-e', upstreamSource], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  })
  const port = await new Promise<number>((resolve, reject) => {
    child.once('error', reject)
    child.once('message', (message) => resolve((message as { port: number }).port))
    child.send({
      one: Buffer.from(openaiChatOneFrame()).toString('base64'),
      many: Buffer.from(openaiChatStream(frames)).toString('base64'),
    })
  })
  return { base: `http://127.0.0.1:${port}`, stop: () => child.disconnect() }
}

function nullSink(): DownstreamSink {
  return {
    signal: new AbortController().signal,
    sendHead() {},
    write() {},
    close() {},
    abort() {},
  }
}

const nodeReadable = Symbol.for('stream-boundary.nodeReadable')

// undici's own pool: keep-alive, no cap on connections (as nodeHttpAttempt's agents).
const undiciAgent = new Agent({ keepAliveTimeout: 60_000 })
const origins = new Map<string, { origin: string; path: string }>()

/** A ready attempt over undici's dispatcher API, its body read as the Node stream it is. */
function undiciAttempt(): ReadyAttempt {
  return async (context) => {
    const { url, headers, body } = attemptRequest(context, {})
    let target = origins.get(url)
    if (target === undefined) {
      const parsed = new URL(url)
      target = { origin: parsed.origin, path: parsed.pathname + parsed.search }
      origins.set(url, target)
    }
    const res = await undiciAgent.request({
      ...target,
      method: 'POST',
      headers,
      body,
      signal: context.signal,
    })
    const stream = res.body
    const iterable = {
      [nodeReadable]: { stream, release: () => stream.destroy() },
      [Symbol.asyncIterator]: () => stream[Symbol.asyncIterator](),
    } as unknown as AsyncIterable<Uint8Array>
    const response = iterableResponse(iterable, { status: res.statusCode })
    for (const [name, value] of Object.entries(res.headers)) {
      if (typeof value === 'string') response.headers.append(name, value)
      else for (const each of value ?? []) response.headers.append(name, each)
    }
    return response
  }
}

type Send = (url: string, init: RequestInit) => Promise<Response>

/** A fetch attempt whose `RequestInit` is `fetchAttempt()`'s with one change. */
function fetchVariant(
  change: (init: RequestInit, request: ReturnType<typeof attemptRequest>) => RequestInit,
  send: Send = fetch,
): ReadyAttempt {
  return async (context) => {
    const request = attemptRequest(context, {})
    const init: RequestInit = {
      method: 'POST',
      headers: request.headers,
      body: request.body,
      signal: context.signal,
      redirect: 'manual',
    }
    return send(request.url, change(init, request))
  }
}

const encoder = new TextEncoder()

const fetchOptionRows: Record<string, ReadyAttempt> = {
  "fetchAttempt() as it ships (header record, string body, signal, redirect: 'manual')":
    fetchAttempt(),
  'the body as bytes (Uint8Array), not a string': fetchVariant((init, r) => ({
    ...init,
    body: typeof r.body === 'string' ? encoder.encode(r.body) : r.body,
  })),
  'the headers as a Headers object': fetchVariant((init, r) => ({
    ...init,
    headers: new Headers(r.headers),
  })),
  'the headers as [name, value] pairs': fetchVariant((init, r) => ({
    ...init,
    headers: Object.entries(r.headers),
  })),
  "duplex: 'half' added": fetchVariant((init) => ({ ...init, duplex: 'half' }) as RequestInit),
  "keepalive: true, mode: 'same-origin', cache: 'no-store' added (no effect on Node)": fetchVariant(
    (init) => ({ ...init, keepalive: true, mode: 'same-origin', cache: 'no-store' }),
  ),
  "without redirect: 'manual' (follows redirects: not allowed)": fetchVariant(
    ({ redirect: _, ...init }) => init,
  ),
  "redirect: 'error', window: null (no request clone; not allowed: a 3xx is read for its location)":
    fetchVariant((init) => ({ ...init, redirect: 'error', window: null })),
  'without the signal (not allowed: an attempt is cancelled before its headers)': fetchVariant(
    ({ signal: _, ...init }) => init,
  ),
}

const pool = createMemoryKeyPool([{ id: 'bench', secret: 'sk-bench-not-real' }])

function relayOnce(
  attempt: ReadyAttempt,
  url: string,
  body: Record<string, unknown>,
): Promise<unknown> {
  return relay({
    sink: nullSink(),
    pool,
    adapter: openaiChat,
    request: { url, body },
    policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
    attempt: attempt as (
      context: AttemptRequestContext & { signal: AbortSignal },
    ) => Promise<Response>,
  })
}

/** CPU µs per request of `requests` relayed requests, `concurrency` at a time. */
async function cpuPerRequest(
  attempt: ReadyAttempt,
  url: string,
  body: () => Record<string, unknown>,
  requests: number,
  concurrency: number,
): Promise<number> {
  const before = process.cpuUsage()
  let next = 0
  const worker = async () => {
    while (next++ < requests) await relayOnce(attempt, url, body())
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  const { user, system } = process.cpuUsage(before)
  return (user + system) / requests
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2
}

/** Each job's median over `rounds`, the jobs run in a rotating order after one warm-up turn. */
async function interleaved(
  jobs: Record<string, () => Promise<number>>,
  rounds: number,
): Promise<Record<string, number>> {
  const entries = Object.entries(jobs)
  for (const [, job] of entries) await job()
  const samples: Record<string, number[]> = {}
  for (let round = 0; round < rounds; round++) {
    for (let turn = 0; turn < entries.length; turn++) {
      const [name, job] = entries[(turn + round) % entries.length] as (typeof entries)[number]
      const sample = await job()
      samples[name] = [...(samples[name] ?? []), sample]
    }
  }
  return Object.fromEntries(Object.entries(samples).map(([name, v]) => [name, median(v)]))
}

const chatBody = () => ({
  model: 'bench',
  stream: true,
  messages: [{ role: 'user', content: 'hi' }],
})

/** A client's request of `messages` turns, as bytes with the client's own spacing. */
function largeRequestBytes(messages: number): Uint8Array {
  const turns = Array.from({ length: messages }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `turn ${i}: ${'lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(8)}`,
  }))
  return encoder.encode(JSON.stringify({ model: 'bench', stream: true, messages: turns }, null, 1))
}

/** The ready attempt on each transport measured, by name. */
function readyAttempts(): Record<string, ReadyAttempt> {
  return {
    'nodeHttpAttempt() (node:http, keep-alive agent)': nodeHttpAttempt(),
    "undici's dispatcher API (Agent.request, undici 7 package)": undiciAttempt(),
    "fetchAttempt({ fetch: undici's fetch }) (undici 7 package)": fetchAttempt({
      fetch: undiciFetch as unknown as Send,
    }),
    "fetchAttempt() (the runtime's fetch)": fetchAttempt(),
  }
}

export async function benchTransports(options: {
  requests: number
  frames: number
  rounds: number
  concurrency?: number
}): Promise<TransportsResult> {
  const { requests, frames, rounds } = options
  const concurrency = options.concurrency ?? 16
  const upstream = await startUpstream(frames)
  const framesPerStream = Buffer.from(openaiChatStream(frames)).toString().split('\n\n').length - 1
  const one = `${upstream.base}/1`
  const many = `${upstream.base}/many`
  const streams = Math.max(16, Math.round(requests / 10))
  const transports = readyAttempts()
  try {
    const perRequest = await interleaved(
      Object.fromEntries(
        Object.entries(transports).map(([name, attempt]) => [
          name,
          () => cpuPerRequest(attempt, one, chatBody, requests, concurrency),
        ]),
      ),
      rounds,
    )
    const perStream = await interleaved(
      Object.fromEntries(
        Object.entries(transports).map(([name, attempt]) => [
          name,
          () => cpuPerRequest(attempt, many, chatBody, streams, concurrency),
        ]),
      ),
      rounds,
    )
    const options = await interleaved(
      Object.fromEntries(
        Object.entries(fetchOptionRows).map(([name, attempt]) => [
          name,
          () => cpuPerRequest(attempt, one, chatBody, requests, concurrency),
        ]),
      ),
      rounds,
    )
    const requestBytes = await benchRequestBytes(one, requests, concurrency, rounds)
    return {
      requests,
      framesPerStream,
      rounds,
      transports: Object.keys(transports).map((name) => ({
        name,
        cpuUsPerRequest: perRequest[name] as number,
        cpuUsPerFrame: (perStream[name] as number) / framesPerStream,
      })),
      fetchOptions: Object.keys(fetchOptionRows).map((name) => ({
        name,
        cpuUsPerRequest: options[name] as number,
      })),
      requestBytes,
    }
  } finally {
    upstream.stop()
    await undiciAgent.close()
  }
}

/**
 * A large request (64 turns, ~35 KB) read with `readClientRequest` each time, as a gateway
 * does: sent as the client's bytes (the body read unchanged) against the same body after a
 * shallow copy (which the relay must serialise again), on both ready attempts.
 */
async function benchRequestBytes(
  url: string,
  requests: number,
  concurrency: number,
  rounds: number,
): Promise<TransportsResult['requestBytes']> {
  const bytes = largeRequestBytes(64)
  const read = async (copy: boolean) => {
    const request = new Request(url, { method: 'POST', body: bytes as Uint8Array<ArrayBuffer> })
    const result = await readClientRequest(request, { adapter: openaiChat, keepClientBytes: !copy })
    if (!result.ok) throw new Error('the bench request was refused')
    return copy ? { ...result.body } : result.body
  }
  const attempts = { 'nodeHttpAttempt()': nodeHttpAttempt(), 'fetchAttempt()': fetchAttempt() }
  const jobs: Record<string, () => Promise<number>> = {}
  for (const [name, attempt] of Object.entries(attempts)) {
    for (const copy of [false, true]) {
      jobs[`${name}, ${copy ? 'body copied: serialised again' : "the client's bytes"}`] =
        async () => {
          const before = process.cpuUsage()
          let next = 0
          const worker = async () => {
            while (next++ < requests) {
              const body = await read(copy)
              await relayOnce(attempt, url, body)
            }
          }
          await Promise.all(Array.from({ length: concurrency }, worker))
          const { user, system } = process.cpuUsage(before)
          return (user + system) / requests
        }
    }
  }
  const results = await interleaved(jobs, rounds)
  return {
    bodyBytes: bytes.byteLength,
    sides: Object.entries(results).map(([name, cpuUsPerRequest]) => ({ name, cpuUsPerRequest })),
  }
}

const fmt = (value: number, digits = 0) => value.toFixed(digits)

/** Prints the tables of {@link benchTransports}: CPU, and each row against its first. */
export function printTransports(result: TransportsResult): void {
  const [base] = result.transports
  console.log(
    `\n### The ready attempt on each transport: relay() into a sink that takes every write, the upstream in its own process (CPU of this process: ${result.requests} requests of 1-frame answers and streams of ${result.framesPerStream} frames, 16 at a time, median of ${result.rounds} interleaved rounds)\n`,
  )
  console.log('| transport | CPU µs/request | × node:http | CPU µs/frame | × node:http |')
  console.log('| --- | ---: | ---: | ---: | ---: |')
  for (const side of result.transports) {
    const perFrame = side.cpuUsPerFrame ?? Number.NaN
    console.log(
      `| ${side.name} | ${fmt(side.cpuUsPerRequest)} | ${fmt(side.cpuUsPerRequest / (base?.cpuUsPerRequest ?? 1), 2)} | ${fmt(perFrame, 2)} | ${fmt(perFrame / (base?.cpuUsPerFrame ?? 1), 2)} |`,
    )
  }
  const [shipped] = result.fetchOptions
  console.log(
    '\n### What each option of a fetch attempt costs (the same relay, one option changed, 1-frame answers)\n',
  )
  console.log('| fetch attempt | CPU µs/request | × fetchAttempt() |')
  console.log('| --- | ---: | ---: |')
  for (const side of result.fetchOptions) {
    console.log(
      `| ${side.name} | ${fmt(side.cpuUsPerRequest)} | ${fmt(side.cpuUsPerRequest / (shipped?.cpuUsPerRequest ?? 1), 2)} |`,
    )
  }
  console.log(
    `\n### A large request (${result.requestBytes.bodyBytes} bytes) read with readClientRequest and relayed: the client's bytes (keepClientBytes) against the body serialised again\n`,
  )
  console.log('| attempt, body | CPU µs/request |')
  console.log('| --- | ---: |')
  for (const side of result.requestBytes.sides)
    console.log(`| ${side.name} | ${fmt(side.cpuUsPerRequest)} |`)
}
