import { createServer, type Socket, connect as tcpConnect } from 'node:net'
import OpenAI from 'openai'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { startGateway } from '../../examples/node-http-gateway.js'
import type { PoolKey, RelayPolicy } from '../../src/index.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { type RunningGateway, startHonoGateway } from '../support/gateways.js'

const answer = 'The quick brown fox jumps over the lazy dog.'
const keys: PoolKey[] = [
  { id: 'key-a', secret: 'sk-gateway-a' },
  { id: 'key-b', secret: 'sk-gateway-b' },
]
const policy: RelayPolicy = {
  peek: { firstByteTimeoutMs: 500, firstOutputTimeoutMs: 800 },
  backoff: { baseMs: 10 },
}

/** Where the proxy cuts its first connection; later connections pass through untouched. */
type Cut =
  | { readonly kind: 'none' }
  /** Both sockets destroyed when the upstream's first response byte arrives (the request went through). */
  | { readonly kind: 'before-response' }
  /** The response head is forwarded, then both sockets are destroyed. */
  | { readonly kind: 'after-headers' }
  /** `frames` SSE frames of the body are forwarded, then nothing more, then both sockets die. */
  | { readonly kind: 'after-frames'; readonly frames: number }

interface SocketClose {
  readonly connection: number
  /** `gateway`: the gateway's own upstream connection; `upstream`: the proxy's onward one. */
  readonly side: 'gateway' | 'upstream'
  readonly at: number
}

/** A TCP proxy standing in for a tunnel that a middlebox may kill. */
async function startTunnel(targetPort: number, cut: Cut) {
  const sockets = new Set<Socket>()
  const closes: SocketClose[] = []
  let connections = 0
  const server = createServer((gatewaySide) => {
    const connection = connections++
    const mode: Cut = connection === 0 ? cut : { kind: 'none' }
    const upstreamSide = tcpConnect(targetPort, '127.0.0.1')
    for (const [socket, side] of [
      [gatewaySide, 'gateway'],
      [upstreamSide, 'upstream'],
    ] as const) {
      sockets.add(socket)
      socket.on('error', () => {})
      socket.on('close', () => {
        sockets.delete(socket)
        closes.push({ connection, side, at: performance.now() })
        // A tunnel closes both ends together.
        gatewaySide.destroy()
        upstreamSide.destroy()
      })
    }
    gatewaySide.on('data', (chunk: Buffer) => upstreamSide.write(chunk))

    let response = Buffer.alloc(0)
    let forwarded = 0
    let cutDone = false
    const kill = () => {
      gatewaySide.destroy()
      upstreamSide.destroy()
    }
    upstreamSide.on('data', (chunk: Buffer) => {
      if (cutDone) return
      if (mode.kind === 'none') {
        gatewaySide.write(chunk)
        return
      }
      if (mode.kind === 'before-response') {
        cutDone = true
        kill()
        return
      }
      response = Buffer.concat([response, chunk])
      const headEnd = response.indexOf('\r\n\r\n')
      let cutAt = -1
      if (headEnd >= 0 && mode.kind === 'after-headers') cutAt = headEnd + 4
      if (headEnd >= 0 && mode.kind === 'after-frames') {
        // Frame ends in the (chunked) body: chunk framing never puts two LFs side by side.
        let at = headEnd + 4
        for (let seen = 0; seen < mode.frames && at >= 0; seen++) {
          at = response.indexOf('\n\n', at)
          if (at >= 0) at += 2
        }
        cutAt = at
      }
      const end = cutAt >= 0 ? cutAt : response.length
      gatewaySide.write(response.subarray(forwarded, end))
      forwarded = end
      if (cutAt < 0) return
      cutDone = true
      // After frames, let the gateway read what it was sent before the tunnel dies.
      if (mode.kind === 'after-frames') setTimeout(kill, 50)
      else kill()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return {
    url: `http://127.0.0.1:${address.port}`,
    closes,
    get connections() {
      return connections
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      }),
  }
}

function startHono(openaiBaseUrl: string): Promise<RunningGateway> {
  return startHonoGateway({ openaiBaseUrl, anthropicBaseUrl: openaiBaseUrl, keys, policy })
}

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

/** Faulty upstream ← TCP tunnel ← gateway (its OpenAI base URL is the tunnel). */
async function setup(cut: Cut, scenario: Scenario = ['ok'], gatewayKind: 'node' | 'hono' = 'node') {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const upstreamUrl = new URL(await upstream.listen())
  cleanups.push(() => upstream.close())
  const tunnel = await startTunnel(Number(upstreamUrl.port), cut)
  cleanups.push(() => tunnel.close())
  const gateway =
    gatewayKind === 'node'
      ? await startGateway({
          openaiBaseUrl: `${tunnel.url}/v1`,
          anthropicBaseUrl: tunnel.url,
          keys,
          policy,
        })
      : await startHono(`${tunnel.url}/v1`)
  cleanups.push(() => gateway.close())
  const openai = new OpenAI({
    apiKey: 'sk-client-own-key',
    baseURL: `${gateway.url}/v1`,
    maxRetries: 0,
    defaultHeaders: { 'x-fault-scenario': 's' },
  })
  return { upstream, tunnel, gateway, openai }
}

async function chat(openai: OpenAI, received: { text: string }): Promise<string> {
  const stream = await openai.chat.completions.create({
    model: 'm',
    messages: [{ role: 'user', content: 'Say the pangram.' }],
    stream: true,
  })
  for await (const chunk of stream) received.text += chunk.choices[0]?.delta?.content ?? ''
  return received.text
}

describe('a tunnel killed between the gateway and the upstream', () => {
  it.each([
    ['before the first response byte', { kind: 'before-response' }],
    ['right after the response headers', { kind: 'after-headers' }],
  ] as const)('%s: the SDK still gets the whole answer', async (_, cut) => {
    const { openai, upstream, tunnel, gateway } = await setup(cut)
    expect(await chat(openai, { text: '' })).toBe(answer)
    // The first connection was really cut, and the request really reached the upstream.
    expect(tunnel.connections).toBe(2)
    expect(upstream.requests).toHaveLength(2)
    await vi.waitFor(() => expect(gateway.outcomes).toHaveLength(1))
    expect(gateway.outcomes[0]).toMatchObject({
      kind: 'committed',
      attempts: [{ retryable: true }, { result: 'committed' }],
    })
  })

  it.each([2, 3])(
    'after %i SSE frames (output already sent): an honest SDK error, never a fake success',
    async (frames) => {
      const { openai, upstream, tunnel, gateway } = await setup({ kind: 'after-frames', frames })
      const received = { text: '' }
      const error = await chat(openai, received).then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(error).toBeInstanceOf(OpenAI.APIError)
      expect((error as Error).message).toMatch(/connection to the upstream was lost/)
      // Frame 1 is the role-only preamble; each later frame is one word of the answer.
      expect(received.text).toBe(
        answer
          .split(' ')
          .slice(0, frames - 1)
          .map((word) => `${word} `)
          .join(''),
      )
      expect(upstream.requests).toHaveLength(1)
      expect(tunnel.connections).toBe(1)
      await vi.waitFor(() => expect(gateway.outcomes).toHaveLength(1))
      expect(gateway.outcomes[0]).toMatchObject({
        kind: 'committed',
        end: { kind: 'error-written' },
      })
    },
  )
})

describe('a client that disconnects mid-stream', () => {
  it.each(['node', 'hono'] as const)(
    '%s gateway: the upstream connection is closed within 1 s',
    async (gatewayKind) => {
      const { gateway, tunnel, upstream } = await setup(
        { kind: 'none' },
        [{ kind: 'slow-drip', delayMs: 200 }],
        gatewayKind,
      )
      const client = new AbortController()
      const response = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
        body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
        signal: client.signal,
      })
      expect(response.status).toBe(200)
      const reader = response.body?.getReader()
      const first = await reader?.read()
      expect(new TextDecoder().decode(first?.value)).toMatch(/^data: /)
      const abortedAt = performance.now()
      client.abort()

      await vi.waitFor(
        () => expect(tunnel.closes.filter((close) => close.connection === 0)).toHaveLength(2),
        { timeout: 3000 },
      )
      const closedAt = (side: SocketClose['side']) =>
        (tunnel.closes.find((close) => close.side === side)?.at ?? Number.NaN) - abortedAt
      const gatewayClosedMs = closedAt('gateway')
      const upstreamClosedMs = closedAt('upstream')
      console.log(
        `[tunnel-kill] ${gatewayKind} gateway: client abort → gateway's upstream socket closed in ${gatewayClosedMs.toFixed(1)} ms, tunnel → upstream socket closed in ${upstreamClosedMs.toFixed(1)} ms`,
      )
      expect(gatewayClosedMs).toBeGreaterThanOrEqual(0)
      expect(gatewayClosedMs).toBeLessThan(1000)
      expect(upstreamClosedMs).toBeLessThan(1000)
      // The stream was far from done: slow-drip needs ~2 s for the whole answer.
      expect(upstream.requests).toHaveLength(1)
      // Whatever its kind (see the next test), the relay knows the client went away.
      await vi.waitFor(() => expect(gateway.outcomes).toHaveLength(1))
      expect(gateway.outcomes[0]?.attempts).toMatchObject([{ result: 'committed' }])
    },
  )

  // Once failed: a retry driver that checked its signal after a resolved attempt turned the
  // committed attempt into an AbortError, so relay() reported `client-gone` and lost keyId,
  // timeToFirstOutputMs, bytes and the pump's end.
  it('the outcome of a post-commit disconnect is the committed attempt, ended client-gone', async () => {
    const { gateway } = await setup({ kind: 'none' }, [{ kind: 'slow-drip', delayMs: 200 }])
    const client = new AbortController()
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
      signal: client.signal,
    })
    await response.body?.getReader().read()
    client.abort()
    await vi.waitFor(() => expect(gateway.outcomes).toHaveLength(1))
    expect(gateway.outcomes[0]).toMatchObject({
      kind: 'committed',
      keyId: expect.stringMatching(/^key-[ab]$/),
      end: { kind: expect.stringMatching(/^(client-gone|aborted)$/) },
    })
  })
})
