import { createServer, type Server } from 'node:http'
import { describe, expect, it } from 'vitest'
import { startGateway } from '../../examples/node-http-gateway.js'
import { finish, role, text } from '../support/chat-frames.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * The example gateway's default upstream client (`node:http`) under a connection storm: many
 * streaming requests at once, a share of their first attempts hung and cut by the first-byte
 * bound, against an upstream with a small listen backlog. Unbounded, each request opened its
 * own connection at once (SYNs past the backlog dropped, a 1 s retransmit each, so attempts
 * hit the first-byte bound), and each cut attempt opened yet another: under the chaos load
 * the upstream fell further behind with every retry.
 */

const requests = 200
const hungEvery = 10
const limit = 32
const answer = 'connections stay bounded'
const answerMs = 400

const { cleanup, listen } = useLoopback()

/**
 * An OpenAI Chat upstream on 127.0.0.1 with a listen backlog of 4: the first attempt of every
 * request whose body says `hang` sends nothing until cut, and says `error` a whole answer
 * with a retryable error frame; every other attempt sends the role preamble at once and the
 * answer `delayMs` later. Counts the connections it accepts.
 */
async function startUpstream(
  delayMs = answerMs,
): Promise<{ url: string; connections: () => number }> {
  let connections = 0
  const attempts = new Map<string, number>()
  const server: Server = createServer((req, res) => {
    withBody(req, (body) => {
      const id = /request (\d+)/.exec(body)?.[1] ?? ''
      const attempt = (attempts.get(id) ?? 0) + 1
      attempts.set(id, attempt)
      if (attempt === 1 && body.includes('hang')) return
      if (attempt === 1 && body.includes('error')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        return void res.end(`${role}data: {"error":{"type":"server_error","message":"retry"}}\n\n`)
      }
      // The answer takes a while, as a model's does, so requests at once need connections at once.
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(role)
      const timer = setTimeout(() => res.end(`${text(answer)}${finish}`), delayMs)
      res.once('close', () => clearTimeout(timer))
    })
  })
  server.on('connection', () => {
    connections++
  })
  return {
    url: await listen(server, { backlog: 4 }),
    connections: () => connections,
  }
}

describe('example gateway, node:http attempts, connection storm', () => {
  it(`answers ${requests} concurrent streams with hung first attempts over at most ${limit} + cut connections`, async () => {
    const upstream = await startUpstream()
    const gateway = await startGateway({
      openaiBaseUrl: `${upstream.url}/v1`,
      anthropicBaseUrl: upstream.url,
      keys: ['a', 'b', 'c', 'd'].map((id) => ({ id, secret: `sk-${id}-not-real` })),
      policy: {
        maxAttempts: 3,
        deadlineMs: 8000,
        peek: { firstByteTimeoutMs: 500, firstOutputTimeoutMs: 1500 },
        backoff: { baseMs: 10 },
      },
      upstreamClient: 'node:http',
      maxPendingStreams: limit,
    })
    cleanup(() => gateway.close())

    const bodies = await Promise.all(
      Array.from({ length: requests }, async (_, index) => {
        const content = `request ${index}${index % hungEvery === 0 ? ' hang' : ''}`
        const response = await fetch(`${gateway.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content }] }),
        })
        return response.text()
      }),
    )

    const answered = bodies.filter((body) => body.includes(answer) && body.includes('[DONE]'))
    expect(answered).toHaveLength(requests)
    // One connection per slot, plus one for each cut attempt (its request was in flight, so
    // its connection cannot be reused), plus a little slack for a keep-alive race.
    const cut = requests / hungEvery
    expect(upstream.connections()).toBeLessThanOrEqual(limit + cut + 8)
  }, 15_000)

  it('reuses the connection of an attempt that arrived whole before the relay let it go', async () => {
    const upstream = await startUpstream(0)
    const gateway = await startGateway({
      openaiBaseUrl: `${upstream.url}/v1`,
      anthropicBaseUrl: upstream.url,
      keys: ['a', 'b'].map((id) => ({ id, secret: `sk-${id}-not-real` })),
      policy: { maxAttempts: 2, backoff: { baseMs: 1 } },
      upstreamClient: 'node:http',
    })
    cleanup(() => gateway.close())
    for (let index = 0; index < 10; index++) {
      const response = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'm',
          stream: true,
          messages: [{ role: 'user', content: `request ${index} error` }],
        }),
      })
      expect(await response.text()).toContain(answer)
    }
    // Twenty attempts, one after another: the error frame's response was read out, not cut.
    expect(upstream.connections()).toBeLessThanOrEqual(2)
  })
})
