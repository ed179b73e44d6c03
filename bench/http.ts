/**
 * HTTP end to end on 127.0.0.1: the same load of concurrent streaming requests through a raw
 * byte-pipe Node proxy, a byte pipe reading with `fetch`, and the Node example gateway with
 * its three upstream clients, to the same local upstream, each relay in its own process and
 * taking its share of the load in turn. Reports each relay process's CPU time per relayed
 * frame and the p50 and p99 time to first byte.
 */

import type { ChildProcess } from 'node:child_process'
import { serveFetch } from '../src/node.js'
import { cpuOf, startServingChild } from './child.js'
import { chunkPerFrame, openaiChatOneFrame, openaiChatStream } from './inputs.js'

interface HttpSide {
  readonly name: string
  readonly frames: number
  readonly cpuUsPerFrame: number
  /** The relay process's CPU per request, whatever its length. */
  readonly cpuUsPerRequest: number
  readonly ttfbP50Ms: number
  readonly ttfbP99Ms: number
  readonly wallMs: number
}

export interface HttpResult {
  readonly requests: number
  readonly concurrency: number
  readonly framesPerRequest: number
  readonly latencyRequests?: number
  readonly raw: HttpSide
  /** A byte pipe reading the upstream with `fetch`: what web streams cost by themselves. */
  readonly fetchPipe: HttpSide
  /** The example gateway with `upstreamClient: 'node:http'`: attempts read as Node streams. */
  readonly gateway: HttpSide
  /** The same gateway with `fetch` attempts. */
  readonly gatewayFetch: HttpSide
  /** The same gateway with `node:http` attempts made web streams again (`Readable.toWeb`). */
  readonly gatewayToWeb: HttpSide
  /** With `parts`: the example's edges without the relay (body, `nodeFetch`, a pipe back). */
  readonly edges?: HttpSide
  /** With `parts`: `relay()` into `nodeSink` alone, every attempt answered in memory. */
  readonly relayMemory?: HttpSide
  /** The gateway's CPU per frame against the raw pipe's. */
  readonly cpuRatio: number
  readonly cpuRatioFetch: number
  readonly cpuRatioToWeb: number
  /** The gateway's p50 and p99 time to first byte against the raw pipe's. */
  readonly ttfbP50Ratio: number
  readonly ttfbP99Ratio: number
}

const sideNames = {
  raw: 'raw byte-pipe proxy (node:http pipe)',
  fetch: 'byte pipe reading the upstream with fetch',
  gateway: "stream-boundary gateway, node:http attempts (the example's default)",
  'gateway-fetch': 'stream-boundary gateway, fetch attempts',
  'gateway-toweb': 'stream-boundary gateway, node:http attempts + Readable.toWeb',
  edges:
    "the example gateway's edges without the relay (body read and parsed, one nodeFetch, a pipe back)",
  'relay-memory': 'relay() into nodeSink alone, each attempt answered in memory (no upstream)',
} as const

/** The relays every run has; `parts` adds `edges` and `relay-memory` (1-frame answers only). */
const mainModes = ['raw', 'fetch', 'gateway', 'gateway-fetch', 'gateway-toweb'] as const

function startRelay(
  mode: keyof typeof sideNames,
  upstream: string,
): Promise<{ child: ChildProcess; url: string }> {
  return startServingChild('http-proxy', [mode, upstream])
}

async function load(
  url: string,
  requests: number,
  concurrency: number,
): Promise<{ ttfb: number[]; frames: number }> {
  const body = JSON.stringify({
    model: 'bench',
    stream: true,
    messages: [{ role: 'user', content: 'hi' }],
  })
  const ttfb: number[] = []
  let frames = 0
  let next = 0
  const worker = async () => {
    while (next < requests) {
      next++
      const started = performance.now()
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      })
      const reader = (response.body as ReadableStream<Uint8Array>).getReader()
      let first = true
      let tail = 0
      for (let r = await reader.read(); !r.done; r = await reader.read()) {
        if (first) {
          ttfb.push(performance.now() - started)
          first = false
        }
        // Count frames by their blank lines, across chunk boundaries.
        for (const byte of r.value) {
          tail = byte === 10 ? tail + 1 : 0
          if (tail === 2) frames++
        }
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  return { ttfb, frames }
}

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}

export async function benchHttp(options: {
  requests: number
  concurrency: number
  framesPerRequest: number
  /** Turns each relay takes, with `requests / rounds` requests each time. @default 4 */
  rounds?: number
  /** Requests made one at a time, for the time to first byte. @default 200 */
  latencyRequests?: number
  /** Also the gateway's parts (`edges`, `relay-memory`; its answer is one frame). @default false */
  parts?: boolean
}): Promise<HttpResult> {
  // No role-only preamble: the first frame is output, so a relay that holds frames until
  // the first output (the gateway) and a pass-through can be held to the same first byte.
  // One frame: the content and the finish in one chunk, no `[DONE]`.
  const chunks =
    options.framesPerRequest === 1
      ? [openaiChatOneFrame()]
      : chunkPerFrame(openaiChatStream(options.framesPerRequest - 2)).slice(1)
  const upstream = await serveFetch(() => {
    let index = 0
    const body = new ReadableStream<Uint8Array>(
      {
        pull(controller) {
          const chunk = chunks[index++]
          if (chunk === undefined) controller.close()
          else controller.enqueue(chunk)
        },
      },
      { highWaterMark: 0 },
    )
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
  })
  const modes: (keyof typeof sideNames)[] = [
    ...mainModes,
    ...(options.parts === true ? (['edges', 'relay-memory'] as const) : []),
  ]
  const relays: { child: ChildProcess; url: string }[] = []
  const tally = modes.map(() => ({
    cpu: 0,
    frames: 0,
    requests: 0,
    wallMs: 0,
    ttfb: [] as number[],
  }))
  try {
    for (const mode of modes) {
      const relay = await startRelay(mode, upstream.url)
      relays.push(relay)
      await load(relay.url, Math.min(32, options.requests), options.concurrency)
    }
    // Side by side: each relay takes a share of the load in turn, round after round, in a
    // rotating order, so a busy moment of the machine does not land on one relay only.
    const rounds = Math.min(options.rounds ?? 4, options.requests)
    const latencyShare = Math.ceil((options.latencyRequests ?? 200) / rounds)
    for (let round = 0; round < rounds; round++) {
      const share =
        Math.floor(options.requests / rounds) + (round < options.requests % rounds ? 1 : 0)
      for (let turn = 0; turn < modes.length; turn++) {
        const index = (turn + round) % modes.length
        const { child, url } = relays[index] as { child: ChildProcess; url: string }
        const side = tally[index] as (typeof tally)[number]
        const cpuBefore = await cpuOf(child)
        const started = performance.now()
        const { frames } = await load(url, share, options.concurrency)
        side.wallMs += performance.now() - started
        side.cpu += (await cpuOf(child)) - cpuBefore
        side.frames += frames
        side.requests += share
        // Time to first byte one request at a time: under the load above it measures the
        // queue in front of the load generator, not the relay.
        side.ttfb.push(...(await load(url, latencyShare, 1)).ttfb)
      }
    }
  } finally {
    for (const { child } of relays) child.send('exit')
    await upstream.close()
  }
  const sides: HttpSide[] = modes.map((mode, index) => {
    const side = tally[index] as (typeof tally)[number]
    return {
      name: sideNames[mode],
      frames: side.frames,
      cpuUsPerFrame: side.cpu / side.frames,
      cpuUsPerRequest: side.cpu / side.requests,
      ttfbP50Ms: quantile(side.ttfb, 0.5),
      ttfbP99Ms: quantile(side.ttfb, 0.99),
      wallMs: side.wallMs,
    }
  })
  const [raw, fetchPipe, gateway, gatewayFetch, gatewayToWeb, edges, relayMemory] = sides as [
    HttpSide,
    HttpSide,
    HttpSide,
    HttpSide,
    HttpSide,
    HttpSide | undefined,
    HttpSide | undefined,
  ]
  return {
    ...options,
    raw,
    fetchPipe,
    gateway,
    gatewayFetch,
    gatewayToWeb,
    ...(edges === undefined ? {} : { edges }),
    ...(relayMemory === undefined ? {} : { relayMemory }),
    cpuRatio: gateway.cpuUsPerFrame / raw.cpuUsPerFrame,
    cpuRatioFetch: gatewayFetch.cpuUsPerFrame / raw.cpuUsPerFrame,
    cpuRatioToWeb: gatewayToWeb.cpuUsPerFrame / raw.cpuUsPerFrame,
    ttfbP50Ratio: gateway.ttfbP50Ms / raw.ttfbP50Ms,
    ttfbP99Ratio: gateway.ttfbP99Ms / raw.ttfbP99Ms,
  }
}
