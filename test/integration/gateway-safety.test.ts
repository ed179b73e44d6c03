import { Buffer } from 'node:buffer'
import { request as httpRequest } from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { type GatewayConfig, startGateway } from '../../examples/node-http-gateway.js'
import type { PoolKey } from '../../src/index.js'
import { serveFetch } from '../../src/node.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { startHonoGateway } from '../support/gateways.js'

const keys: PoolKey[] = [
  { id: 'key-a', secret: 'sk-gateway-a' },
  { id: 'key-b', secret: 'sk-gateway-b' },
]

/** What a real OpenAI upstream adds to every answer: its account's ids and one key's budget. */
const accountHeaders = {
  'openai-organization': 'org-tenant-secret',
  'openai-project': 'proj_tenant_secret',
  'x-ratelimit-remaining-requests': '17',
}

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

/**
 * A faulty upstream on 127.0.0.1 that also sends account, rate-limit and request-id headers,
 * and the example gateway in front of it.
 */
async function setup(
  scenario: Scenario,
  options: Partial<Omit<GatewayConfig, 'port'>> = {},
  start: typeof startGateway | typeof startHonoGateway = startGateway,
) {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const served = await serveFetch(async (request) => {
    const answer = await upstream.handle(request)
    const headers = new Headers(answer.headers)
    for (const [name, value] of Object.entries(accountHeaders)) headers.set(name, value)
    headers.set('x-request-id', `req_upstream_${upstream.requests.length}`)
    return new Response(answer.body, { status: answer.status, headers })
  })
  cleanups.push(async () => {
    await upstream.close()
    await served.close()
  })
  const gateway = await start({
    openaiBaseUrl: `${served.url}/v1`,
    anthropicBaseUrl: served.url,
    keys,
    policy: {
      peek: { firstByteTimeoutMs: 500, firstOutputTimeoutMs: 800 },
      backoff: { baseMs: 5 },
    },
    ...options,
  })
  cleanups.push(() => gateway.close())
  return { upstream, gateway }
}

function chatBody(stream: boolean): string {
  return JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream })
}

async function post(url: string, body: string, headers: Record<string, string> = {}) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-fault-scenario': 's', ...headers },
    body,
  })
  return { headers: response.headers, status: response.status, text: await response.text() }
}

interface Sent {
  readonly status: number
  readonly body: string
  /** Bytes handed to the socket before the answer came. */
  readonly written: number
}

/**
 * Streams a chunked body of `totalBytes` (one shared buffer, so the client holds no memory of
 * its own) until the gateway answers, then stops.
 */
function sendChunked(url: string, totalBytes: number, headers: Record<string, string> = {}) {
  return new Promise<Sent>((resolve) => {
    const chunk = Buffer.alloc(64 * 1024, 0x61)
    let written = 0
    let answered = false
    const req = httpRequest(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-fault-scenario': 's', ...headers },
    })
    req.on('response', (res) => {
      answered = true
      const writtenAtAnswer = written
      const parts: Buffer[] = []
      res.on('data', (part: Buffer) => parts.push(part))
      res.on('end', () => {
        resolve({
          status: res.statusCode ?? 0,
          body: Buffer.concat(parts).toString(),
          written: writtenAtAnswer,
        })
        req.destroy()
      })
      res.on('error', (error: NodeJS.ErrnoException) =>
        resolve({ status: 0, body: `answer cut: ${error.code ?? error.message}`, written }),
      )
    })
    // Once answered, the gateway closes the connection on the unread rest: a write error then
    // is expected. Before an answer it is a failure, reported with its code rather than thrown.
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (!answered)
        resolve({ status: 0, body: `no answer: ${error.code ?? error.message}`, written })
    })
    const pump = () => {
      while (!answered && written < totalBytes) {
        written += chunk.length
        if (!req.write(chunk)) return void req.once('drain', pump)
      }
      if (!answered) req.end()
    }
    pump()
  })
}

/** Declares a `content-length` past the bound and sends nothing, waiting for the answer. */
function declareOnly(url: string, contentLength: number) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = httpRequest(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': String(contentLength) },
    })
    req.on('response', (res) => {
      const parts: Buffer[] = []
      res.on('data', (part: Buffer) => parts.push(part))
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString() })
        req.destroy()
      })
    })
    req.on('error', reject)
    req.flushHeaders()
  })
}

describe('example gateway: upstream headers clients see', () => {
  it('a streaming client never sees the upstream account ids or one key’s rate limit, and does see x-request-id', async () => {
    const { gateway } = await setup(['ok'])
    const answer = await post(`${gateway.url}/v1/chat/completions`, chatBody(true))
    expect(answer.status).toBe(200)
    expect(answer.text).toContain('[DONE]')
    expect(answer.headers.get('openai-organization')).toBeNull()
    expect(answer.headers.get('openai-project')).toBeNull()
    expect(answer.headers.get('x-ratelimit-remaining-requests')).toBeNull()
    expect(answer.headers.get('x-request-id')).toBe('req_upstream_1')
  })

  it('a plain client never sees them either, and does see x-request-id', async () => {
    const { gateway } = await setup(['ok'])
    const answer = await post(`${gateway.url}/v1/chat/completions`, chatBody(false))
    expect(answer.status).toBe(200)
    expect(answer.headers.get('content-type')).toBe('application/json')
    for (const name of Object.keys(accountHeaders)) expect(answer.headers.get(name)).toBeNull()
    expect(answer.headers.get('x-request-id')).toBe('req_upstream_1')
  })

  it('an operator asking for rate-limit headers gets them, and still no account ids', async () => {
    const { gateway } = await setup(['ok'], { forwardHeaders: { rateLimit: true } })
    const answer = await post(`${gateway.url}/v1/chat/completions`, chatBody(false))
    expect(answer.headers.get('x-ratelimit-remaining-requests')).toBe('17')
    expect(answer.headers.get('openai-organization')).toBeNull()
    expect(answer.headers.get('openai-project')).toBeNull()
  })

  it('the client’s own x-client-request-id reaches the upstream on every attempt', async () => {
    const { gateway, upstream } = await setup(['empty', 'ok'])
    const answer = await post(`${gateway.url}/v1/chat/completions`, chatBody(true), {
      'x-client-request-id': 'client-7',
    })
    expect(answer.status).toBe(200)
    expect(upstream.requests.map((r) => r.headers['x-client-request-id'])).toEqual([
      'client-7',
      'client-7',
    ])
  })
})

describe('example gateways: hop-by-hop request headers', () => {
  it.each([
    ['node:http', startGateway],
    ['hono', startHonoGateway],
  ] as const)(
    '%s: a header the client named in Connection never reaches the upstream',
    async (_, start) => {
      const { gateway, upstream } = await setup(['ok'], {}, start)
      const send = (connection: string) =>
        new Promise<number>((resolve, reject) => {
          const body = JSON.stringify({ model: 'm', max_tokens: 8, messages: [], stream: false })
          const req = httpRequest(`${gateway.url}/v1/messages`, {
            method: 'POST',
            headers: {
              'content-type': 'application/json',
              'x-fault-scenario': 's',
              'anthropic-beta': 'tools-2024',
              connection,
            },
          })
          req.on('response', (res) => {
            res.resume()
            res.on('end', () => resolve(res.statusCode ?? 0))
          })
          req.on('error', reject)
          req.end(body)
        })
      expect(await send('keep-alive, anthropic-beta')).toBe(200)
      expect(await send('keep-alive')).toBe(200)
      expect(upstream.requests.map((r) => r.headers['anthropic-beta'])).toEqual([
        undefined,
        'tools-2024',
      ])
    },
  )
})

describe('example gateways: oversized request bodies', () => {
  it('a declared content-length past the bound gets 413 in OpenAI’s shape, and the upstream is never contacted', async () => {
    const { gateway, upstream } = await setup(['ok'], { maxRequestBodyBytes: 1024 })
    const answer = await declareOnly(`${gateway.url}/v1/chat/completions`, 10 * 1024 * 1024)
    expect(answer.status).toBe(413)
    expect(JSON.parse(answer.body)).toMatchObject({
      error: { type: 'request_too_large', message: expect.stringContaining('1024 bytes') },
    })
    expect(upstream.requests).toHaveLength(0)
  })

  it.each([
    ['node http', startGateway],
    ['hono', startHonoGateway],
  ] as const)(
    '%s: a chunked body past the bound gets 413 in Anthropic’s shape before it is all sent',
    async (_, start) => {
      const limit = 256 * 1024
      const total = 64 * 1024 * 1024
      const { gateway, upstream } = await setup(['ok'], { maxRequestBodyBytes: limit }, start)
      const sent = await sendChunked(`${gateway.url}/v1/messages`, total, {
        'anthropic-version': '2023-06-01',
      })
      expect(sent.status).toBe(413)
      expect(JSON.parse(sent.body)).toMatchObject({
        type: 'error',
        error: { type: 'request_too_large' },
      })
      expect(upstream.requests).toHaveLength(0)
      // The rest of the 64 MiB was never read: only the bound plus what socket buffers held.
      expect(sent.written).toBeLessThan(16 * 1024 * 1024)
    },
  )

  it('a fetch client streaming an oversized body gets the 413, not a reset connection', async () => {
    const limit = 256 * 1024
    const { gateway, upstream } = await setup(['ok'], { maxRequestBodyBytes: limit })
    let pulled = 0
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (pulled >= 64 * 1024 * 1024) return controller.close()
        pulled += 64 * 1024
        controller.enqueue(new Uint8Array(64 * 1024).fill(0x61))
      },
    })
    const response = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      duplex: 'half',
    } as RequestInit)
    expect(response.status).toBe(413)
    expect(await response.json()).toMatchObject({ error: { type: 'request_too_large' } })
    expect(upstream.requests).toHaveLength(0)
    expect(pulled).toBeLessThan(16 * 1024 * 1024)
  })

  it('20 concurrent oversized clients keep the gateway’s memory bounded', async () => {
    const limit = 1024 * 1024
    const total = 32 * 1024 * 1024
    const { gateway, upstream } = await setup(['ok'], { maxRequestBodyBytes: limit })
    const before = process.memoryUsage()
    let peak = 0
    const sample = setInterval(() => {
      const now = process.memoryUsage()
      peak = Math.max(peak, now.heapUsed + now.arrayBuffers - before.heapUsed - before.arrayBuffers)
    }, 5)
    const sent = await Promise.all(
      Array.from({ length: 20 }, () => sendChunked(`${gateway.url}/v1/chat/completions`, total)),
    ).finally(() => clearInterval(sample))
    const written = sent.reduce((sum, s) => sum + s.written, 0)
    const figures = `20 oversized clients through the gateway: ${(written / 2 ** 20).toFixed(1)} MiB written before the 413s, peak heap+arrayBuffers delta ${(peak / 2 ** 20).toFixed(1)} MiB`
    console.info(figures)
    expect(sent.map((s) => (s.status === 413 ? 413 : s.body))).toEqual(Array(20).fill(413))
    expect(upstream.requests).toHaveLength(0)
    // Unbounded, the gateway would hold 20 × 32 MiB = 640 MiB; bounded, about 20 × 1 MiB.
    expect(peak, figures).toBeLessThan(96 * 1024 * 1024)
  })
})
