import type { Server } from 'node:http'
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import { afterEach, describe, expect, it } from 'vitest'
import { openaiChat, type RelayOutcome, relay, webSink } from '../../src/index.js'
import { clientSignal } from '../../src/node.js'
import { chunk, startChatUpstream } from '../support/chat-upstream.js'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

type SignalChoice = 'clientSignal' | 'request-signal' | 'none'

/**
 * A Hono app on @hono/node-server whose logging middleware clones every response (as many
 * gateways do): the clone tees the body, so the client's cancel no longer reaches the relay's
 * sink, and only a signal handed to `relay` tells it that the client left.
 */
async function startHonoWithClone(upstreamUrl: string, choice: SignalChoice) {
  const outcomes: RelayOutcome[] = []
  const logged: Promise<string>[] = []
  const app = new Hono<{ Bindings: { incoming: never; outgoing: never } }>()
  app.use(async (c, next) => {
    await next()
    logged.push(
      c.res
        .clone()
        .text()
        .catch(() => ''),
    )
  })
  app.post('/v1/chat/completions', (c) => {
    const { sink, response } = webSink()
    const signal =
      choice === 'clientSignal'
        ? clientSignal(c.env.incoming, c.env.outgoing)
        : choice === 'request-signal'
          ? c.req.raw.signal
          : undefined
    void relay({
      sink,
      signal,
      adapter: openaiChat,
      attempt: ({ signal: attemptSignal }) =>
        fetch(`${upstreamUrl}/v1/chat/completions`, { method: 'POST', signal: attemptSignal }),
      policy: { maxAttempts: 1 },
    }).then((outcome) => outcomes.push(outcome))
    return response
  })
  const server = await new Promise<Server>((resolve) => {
    const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () =>
      resolve(started as Server),
    )
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  )
  return { url: `http://127.0.0.1:${address.port}`, outcomes }
}

/** An upstream that streams one chunk and then holds the connection open. */
async function holdingUpstream() {
  const upstream = await startChatUpstream([
    { frames: [chunk({ role: 'assistant', content: 'Hel' })], end: 'hold' },
  ])
  cleanups.push(upstream.close)
  return upstream
}

async function waitFor(check: () => boolean, withinMs: number): Promise<boolean> {
  const until = performance.now() + withinMs
  while (performance.now() < until) {
    if (check()) return true
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return check()
}

describe('client disconnect on @hono/node-server with a cloned (logged) response', () => {
  for (const choice of ['clientSignal', 'request-signal'] as const) {
    it(`${choice}: the upstream sees its connection closed within a second of the client leaving`, async () => {
      const upstream = await holdingUpstream()
      const gateway = await startHonoWithClone(upstream.url, choice)
      const client = new AbortController()
      const response = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        signal: client.signal,
      })
      const reader = (response.body as ReadableStream<Uint8Array>).getReader()
      const first = await reader.read()
      expect(new TextDecoder().decode(first.value)).toContain('Hel')
      const left = performance.now()
      client.abort()
      expect(await waitFor(() => upstream.closedAt.length === 1, 1_000)).toBe(true)
      expect((upstream.closedAt[0] as number) - left).toBeLessThan(1_000)
      expect(await waitFor(() => gateway.outcomes.length === 1, 1_000)).toBe(true)
      expect(gateway.outcomes[0]).toMatchObject({ kind: 'committed', end: { kind: 'aborted' } })
    })
  }
})

describe('without a signal', () => {
  it('a cloned response hides the disconnect: the upstream stays open (why the signal is needed)', async () => {
    const upstream = await holdingUpstream()
    const gateway = await startHonoWithClone(upstream.url, 'none')
    const client = new AbortController()
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      signal: client.signal,
    })
    await (response.body as ReadableStream<Uint8Array>).getReader().read()
    client.abort()
    expect(await waitFor(() => upstream.closedAt.length > 0, 500)).toBe(false)
    expect(gateway.outcomes).toEqual([])
  })
})

describe('clientSignal(req, res) on Node http', () => {
  async function serveWith(
    onRequest: (signal: AbortSignal, res: import('node:http').ServerResponse) => void,
  ) {
    const { createServer } = await import('node:http')
    const server = createServer((req, res) => onRequest(clientSignal(req, res), res))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const address = server.address() as import('node:net').AddressInfo
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve())
          server.closeAllConnections()
        }),
    )
    return `http://127.0.0.1:${address.port}`
  }

  it('aborts when the client leaves before the response finished', async () => {
    let signal: AbortSignal | undefined
    const url = await serveWith((s, res) => {
      signal = s
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: 1\n\n')
    })
    const client = new AbortController()
    const response = await fetch(url, { signal: client.signal })
    await (response.body as ReadableStream<Uint8Array>).getReader().read()
    client.abort()
    expect(await waitFor(() => signal?.aborted === true, 1_000)).toBe(true)
  })

  it('stays quiet when the response finished normally', async () => {
    let signal: AbortSignal | undefined
    const url = await serveWith((s, res) => {
      signal = s
      res.end('done')
    })
    expect(await (await fetch(url)).text()).toBe('done')
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(signal?.aborted).toBe(false)
  })
})
