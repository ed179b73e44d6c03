import { createServer } from 'node:http'
import { describe, expect, it } from 'vitest'
import { startGateway } from '../../examples/node-http-gateway.js'
import { createMemoryKeyPool, createResilientFetch } from '../../src/index.js'
import { startHonoGateway } from '../support/gateways.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * Invariant 17: an attempt the library makes never follows a redirect, so a pool key never
 * travels to another origin (fetch resends `x-api-key` and `x-goog-api-key` on a redirect).
 */

const { listen, cleanup } = useLoopback()
const secret = 'gsk_live_redirect_0123456789abcdef'

/** Another origin that records every credential it is sent. */
async function elsewhere() {
  const received: string[] = []
  const server = createServer((req, res) => {
    withBody(req, () => {
      received.push(
        String(
          req.headers.authorization ?? req.headers['x-api-key'] ?? req.headers['x-goog-api-key'],
        ),
      )
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  return { url: await listen(server), received }
}

/** An upstream that answers every request with `status` and a `location` on `target`. */
async function redirecting(status: number, target: string) {
  let requests = 0
  const server = createServer((req, res) => {
    withBody(req, () => {
      requests++
      res.writeHead(status, { location: `${target}${req.url ?? '/'}` }).end()
    })
  })
  return { url: await listen(server), requests: () => requests }
}

const protocols = [
  { name: 'OpenAI Chat', path: '/v1/chat/completions', streamPath: '/v1/chat/completions' },
  { name: 'Anthropic Messages', path: '/v1/messages', streamPath: '/v1/messages' },
  {
    name: 'Gemini',
    path: '/v1beta/models/m:generateContent',
    streamPath: '/v1beta/models/m:streamGenerateContent',
  },
] as const

describe('createResilientFetch never follows a redirect with a pool key', () => {
  describe.each([302, 307, 308])('%d', (status) => {
    it.each(protocols)(
      '$name, streaming and not: 502 naming the target origin, nothing sent there',
      async ({ path, streamPath }) => {
        const target = await elsewhere()
        const upstream = await redirecting(status, target.url)
        const fetch = createResilientFetch({
          pool: createMemoryKeyPool([{ id: 'only', secret }]),
          policy: { maxAttempts: 2, backoff: { baseMs: 1, maxMs: 2 } },
        })
        for (const [stream, url] of [
          [true, streamPath],
          [false, path],
        ] as const) {
          const response = await fetch(`${upstream.url}${url}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'm', messages: [], stream, contents: [] }),
          })
          const body = await response.text()
          expect(response.status).toBe(502)
          expect(body).toContain(`${status} redirecting to ${new URL(target.url).origin}`)
          expect(body).not.toContain(secret)
        }
        expect(target.received).toEqual([])
        // A redirect is not retried: the next attempt would be sent the same way.
        expect(upstream.requests()).toBe(2)
      },
    )
  })
})

describe('the example gateways never follow a redirect with a pool key', () => {
  it.each(['node:http', 'fetch', 'hono'] as const)('%s attempts', async (client) => {
    const target = await elsewhere()
    const upstream = await redirecting(307, target.url)
    const config = {
      openaiBaseUrl: `${upstream.url}/v1`,
      anthropicBaseUrl: upstream.url,
      keys: [{ id: 'only', secret }],
      policy: { maxAttempts: 1 },
    }
    const gateway =
      client === 'hono'
        ? await startHonoGateway(config)
        : await startGateway({ ...config, upstreamClient: client })
    cleanup(gateway.close)
    for (const stream of [true, false]) {
      const response = await fetch(`${gateway.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', max_tokens: 8, messages: [], stream }),
      })
      expect(response.status).toBe(502)
      expect(await response.text()).not.toContain(secret)
    }
    expect(target.received).toEqual([])
  })
})
