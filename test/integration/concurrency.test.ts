import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGateway } from '../../examples/node-http-gateway.js'
import { createHedging, type RelayOutcome } from '../../src/index.js'

/**
 * Hundreds of concurrent streams over a few keys, with a fifth of the upstream attempts
 * failing before output in mixed ways and no upstream rate limit at all: nobody may be told
 * the keys are rate limited or busy, and nobody may see two attempts' output.
 */

const words = 12
type Fault = 'ok' | 'empty' | 'status-503' | 'error-frame' | 'reset'

function chunk(content: string | null, finish: string | null = null): string {
  const delta = content === null ? {} : { content }
  return `data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
}

/**
 * An upstream whose attempts fail before output with probability `faultRate`, seeded; with
 * probability `slowRate` an answer sits in prefill for `slowMs` before its first output.
 */
async function startUpstream(faultRate: number, seed: number, slowRate = 0, slowMs = 0) {
  let state = seed >>> 0
  const random = () => {
    // xorshift32: a seeded, repeatable fault mix.
    state ^= state << 13
    state ^= state >>> 17
    state ^= state << 5
    return (state >>> 0) / 2 ** 32
  }
  const faults: Fault[] = ['empty', 'status-503', 'error-frame', 'reset']
  let attempts = 0
  let cutInPrefill = 0
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume()
    req.on('end', () => {
      const attempt = ++attempts
      const fault: Fault =
        random() < faultRate ? (faults[Math.floor(random() * faults.length)] as Fault) : 'ok'
      if (fault === 'reset') {
        req.socket.destroy()
        return
      }
      if (fault === 'status-503') {
        res.writeHead(503, { 'content-type': 'application/json' })
        res.end('{"error":{"message":"unavailable","type":"server_error"}}')
        return
      }
      const slow = random() < slowRate
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(chunk(''))
      if (fault === 'empty') {
        res.end()
        return
      }
      if (fault === 'error-frame') {
        res.end('data: {"error":{"message":"internal failure","type":"server_error"}}\n\n')
        return
      }
      let sent = 0
      let prefill = slow
      let closed = false
      res.on('close', () => {
        if (prefill && !res.writableEnded) cutInPrefill++
        closed = true
      })
      if (slow) setTimeout(() => (prefill = false), slowMs)
      const timer = setInterval(() => {
        if (prefill || closed) return
        if (sent < words) {
          res.write(chunk(`a${attempt}w${sent} `))
          sent++
          return
        }
        clearInterval(timer)
        res.end(`${chunk(null, 'stop')}data: [DONE]\n\n`)
      }, 5)
      res.on('close', () => clearInterval(timer))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    get attempts() {
      return attempts
    },
    /** Slow answers whose connection was closed while still in prefill. */
    get cutInPrefill() {
      return cutInPrefill
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

async function stream(url: string) {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  })
  return { status: response.status, text: await response.text() }
}

describe('300 concurrent streams over 4 keys, 20 % pre-output faults, no upstream 429', () => {
  let upstream: Awaited<ReturnType<typeof startUpstream>>
  let gateway: Awaited<ReturnType<typeof startGateway>>

  beforeAll(async () => {
    upstream = await startUpstream(0.2, 20261130)
    gateway = await startGateway({
      openaiBaseUrl: upstream.url,
      anthropicBaseUrl: upstream.url,
      keys: ['k1', 'k2', 'k3', 'k4'].map((id) => ({ id, secret: `sk-${id}-0123456789abcdef` })),
      policy: {
        backoff: { baseMs: 20, maxMs: 200 },
        keepAliveIntervalMs: Number.POSITIVE_INFINITY,
      },
    })
  })

  afterAll(async () => {
    await gateway.close()
    await upstream.close()
  })

  it('no client is told "busy" or "rate limited"; each gets the whole answer or an honest 5xx; none sees two attempts; every in-flight count returns to 0', async () => {
    const results = await Promise.all(Array.from({ length: 300 }, () => stream(gateway.url)))
    const statuses = results.map((r) => r.status)
    expect(statuses.filter((s) => s === 429)).toHaveLength(0)
    expect(results.filter((r) => /every upstream key/i.test(r.text))).toHaveLength(0)
    for (const result of results) {
      if (result.status === 200) {
        const tags = new Set(result.text.match(/a\d+w/g) ?? [])
        // One attempt's words only, all of them, then a clean end.
        expect(tags.size).toBe(1)
        expect(result.text.match(/a\d+w\d+ /g)).toHaveLength(words)
        expect(result.text).toContain('data: [DONE]')
      } else {
        expect(result.status).toBeGreaterThanOrEqual(500)
        expect(JSON.parse(result.text)).toHaveProperty('error.message')
      }
    }
    // An honest 5xx only when every attempt failed: with 3 attempts at 20 %, a handful at most.
    expect(statuses.filter((s) => s !== 200).length).toBeLessThanOrEqual(12)
    const outcomes: RelayOutcome[] = gateway.outcomes
    expect(outcomes).toHaveLength(300)
    for (const outcome of outcomes) {
      if (outcome.kind === 'failed') {
        expect(outcome.attempts).toHaveLength(3)
        expect(outcome.reason).not.toMatch(/^all-keys-|^no-key/)
      }
    }
    const stats = await gateway.pools.openai.stats()
    expect(stats.reduce((n, key) => n + key.inflight, 0)).toBe(0)
    expect(stats.map((key) => key.leases).reduce((a, b) => a + b, 0)).toBe(upstream.attempts)
    // Failed attempts were retried: more upstream attempts than clients.
    expect(upstream.attempts).toBeGreaterThan(300)
  }, 60_000)
})

describe('300 concurrent streams over 4 keys, hedged: a tenth sit in prefill for 2 s, 10 % faults', () => {
  let upstream: Awaited<ReturnType<typeof startUpstream>>
  let gateway: Awaited<ReturnType<typeof startGateway>>
  const hedging = createHedging({ afterMs: 300, budget: 0.2 })

  beforeAll(async () => {
    upstream = await startUpstream(0.1, 20261201, 0.1, 2_000)
    gateway = await startGateway({
      openaiBaseUrl: upstream.url,
      anthropicBaseUrl: upstream.url,
      keys: ['k1', 'k2', 'k3', 'k4'].map((id) => ({ id, secret: `sk-${id}-0123456789abcdef` })),
      policy: {
        backoff: { baseMs: 20, maxMs: 200 },
        keepAliveIntervalMs: Number.POSITIVE_INFINITY,
        hedge: hedging,
      },
    })
  })

  afterAll(async () => {
    await gateway.close()
    await upstream.close()
  })

  it('no client sees two attempts; hedges stay within the budget; losers are cut in prefill; leases equal attempts and in-flight returns to 0', async () => {
    const results = await Promise.all(Array.from({ length: 300 }, () => stream(gateway.url)))
    for (const result of results) {
      if (result.status !== 200) continue
      expect(new Set(result.text.match(/a\d+w/g) ?? []).size).toBe(1)
      expect(result.text.match(/a\d+w\d+ /g)).toHaveLength(words)
    }
    const outcomes: RelayOutcome[] = gateway.outcomes
    expect(outcomes).toHaveLength(300)
    let started = 0
    let cancelled = 0
    let won = 0
    for (const outcome of outcomes) {
      if (outcome.kind !== 'committed') continue
      started += outcome.hedges?.started ?? 0
      cancelled += outcome.hedges?.cancelled ?? 0
      if (outcome.hedges?.wonByHedge) won++
    }
    expect(started).toBe(hedging.snapshot().hedges)
    expect(started).toBeLessThanOrEqual(0.2 * 300)
    expect(won).toBeGreaterThan(0)
    // Every cancelled attempt closed its upstream connection; those in prefill were cut there.
    expect(upstream.cutInPrefill).toBeGreaterThan(0)
    expect(upstream.cutInPrefill).toBeLessThanOrEqual(cancelled)
    const stats = await gateway.pools.openai.stats()
    expect(stats.reduce((n, key) => n + key.inflight, 0)).toBe(0)
    expect(stats.map((key) => key.leases).reduce((a, b) => a + b, 0)).toBe(upstream.attempts)
    console.log(
      `hedged: ${started} hedges for 300 requests (${won} won, ${cancelled} attempts cancelled, ${upstream.cutInPrefill} cut in prefill), ${upstream.attempts} upstream attempts`,
    )
  }, 60_000)
})
