/**
 * What one `fetch()` costs per request on this runtime, by the options an attempt passes: a
 * POST to a local server, its one-frame answer read to the end, client and server in this one
 * process (CPU per request, 16 at a time, interleaved rounds). With an `AbortSignal` (every
 * attempt has one, to be cancelled before its headers), undici follows the signal with one of
 * its own; unless the redirect mode is `error` and the window `no-window`, it clones the request
 * and tees its body's stream before sending it (the Fetch standard's HTTP-network-or-cache
 * fetch), whatever the body is. An attempt cannot take `redirect: 'error'`: the relay reads a
 * redirect's `location` to name it in its answer, and an error carries none.
 */

import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface FetchCostResult {
  readonly requests: number
  /** CPU µs per request, by the `fetch` options named. */
  readonly perRequestUs: Readonly<Record<string, number>>
}

const body = JSON.stringify({ model: 'bench', stream: true, messages: [] })
const answer = 'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\n'

const variants: Record<string, () => RequestInit> = {
  'no signal (a byte pipe)': () => ({
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  }),
  "an AbortSignal and redirect: 'manual' (an attempt, the example gateway)": () => ({
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    signal: new AbortController().signal,
    redirect: 'manual',
  }),
  "no signal, redirect: 'error' and window: null (no request clone)": () => ({
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    redirect: 'error',
    window: null,
  }),
}

export async function benchFetchCost(options: {
  requests: number
  rounds: number
}): Promise<FetchCostResult> {
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' }).end(answer)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
  const run = async (init: () => RequestInit, requests: number) => {
    const before = process.cpuUsage()
    let next = 0
    const worker = async () => {
      while (next++ < requests) {
        const response = await fetch(url, init())
        const reader = (response.body as ReadableStream<Uint8Array>).getReader()
        while (!(await reader.read()).done) {}
      }
    }
    await Promise.all(Array.from({ length: 16 }, worker))
    const { user, system } = process.cpuUsage(before)
    return (user + system) / requests
  }
  const totals: Record<string, number> = {}
  try {
    for (const init of Object.values(variants)) await run(init, Math.min(200, options.requests))
    // In a rotating order, so no variant always runs first (or right after the same one).
    const entries = Object.entries(variants)
    for (let round = 0; round < options.rounds; round++) {
      for (let turn = 0; turn < entries.length; turn++) {
        const [name, init] = entries[(turn + round) % entries.length] as (typeof entries)[number]
        totals[name] = (totals[name] ?? 0) + (await run(init, options.requests)) / options.rounds
      }
    }
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
  return { requests: options.requests, perRequestUs: totals }
}
