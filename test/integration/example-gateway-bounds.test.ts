import { createServer, type Server } from 'node:http'
import { describe, expect, it } from 'vitest'
import { startGateway } from '../../examples/node-http-gateway.js'
import { finish, role, text } from '../support/chat-frames.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * What the example gateway holds and sends per request, as a long-running gateway sees it:
 * its `maxPendingStreams` bound covers requests before their first output only (relayed
 * streams do not queue new ones), its outcome list stays bounded, and the upstream gets the
 * client's body bytes as they came.
 */

const { cleanup, listen } = useLoopback()

/**
 * An OpenAI Chat upstream: the answer's first text at once, then (when the body says `hold`)
 * the end only when `release()` is called. Records the raw bodies it got.
 */
async function startUpstream() {
  const bodies: string[] = []
  const held: (() => void)[] = []
  let open = 0
  let mostOpen = 0
  const server: Server = createServer((req, res) => {
    withBody(req, (body) => {
      bodies.push(body)
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`${role}${text('streaming')}`)
      open++
      mostOpen = Math.max(mostOpen, open)
      const end = () => {
        open--
        res.end(finish)
      }
      if (body.includes('hold')) held.push(end)
      else end()
    })
  })
  return {
    url: await listen(server),
    bodies,
    mostOpen: () => mostOpen,
    release: () => {
      for (const end of held.splice(0)) end()
    },
  }
}

async function gatewayFor(upstreamUrl: string, maxPendingStreams?: number) {
  const gateway = await startGateway({
    openaiBaseUrl: `${upstreamUrl}/v1`,
    anthropicBaseUrl: upstreamUrl,
    keys: [{ id: 'a', secret: 'sk-a-not-real' }],
    policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
    ...(maxPendingStreams === undefined ? {} : { maxPendingStreams }),
  })
  cleanup(() => gateway.close())
  return gateway
}

const chat = (url: string, content: string, raw?: string) =>
  fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body:
      raw ?? JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content }] }),
  })

describe('example gateway: what it holds per request', () => {
  it('bounds requests before their first output, not relayed streams: 12 held streams run at once with maxPendingStreams 2', async () => {
    const upstream = await startUpstream()
    const gateway = await gatewayFor(upstream.url, 2)
    const responses = await Promise.all(
      Array.from({ length: 12 }, (_, i) => chat(gateway.url, `hold ${i}`)),
    )
    // Every stream reached its first output while the others were still open upstream.
    expect(upstream.mostOpen()).toBe(12)
    upstream.release()
    const bodies = await Promise.all(responses.map((response) => response.text()))
    for (const body of bodies) expect(body).toContain('[DONE]')
  })

  it('keeps the last 1,000 outcomes, not one per request forever', async () => {
    const upstream = await startUpstream()
    const gateway = await gatewayFor(upstream.url)
    let next = 0
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < 1_050) {
          next++
          expect(await (await chat(gateway.url, 'short')).text()).toContain('[DONE]')
        }
      }),
    )
    expect(gateway.outcomes).toHaveLength(1_000)
    expect(gateway.outcomes.every((outcome) => outcome.kind === 'committed')).toBe(true)
  }, 30_000)

  // The attempt sends the request the relay holds (`context.request`), serialised again: the
  // client's bytes are not reused, since the host or the relay may have changed the request.
  it("sends the client's request as it parsed, non-ASCII included, when the relay did not change it", async () => {
    const upstream = await startUpstream()
    const gateway = await gatewayFor(upstream.url)
    const raw =
      '{ "model": "m",\n  "stream": true, "messages": [{"role": "user", "content": "as sent ✓ 🦊"}] }'
    expect(await (await chat(gateway.url, '', raw)).text()).toContain('[DONE]')
    expect(upstream.bodies.map((body) => JSON.parse(body))).toEqual([JSON.parse(raw)])
  })

  it("answers invalid requests 400 in the route's protocol and sends nothing upstream", async () => {
    const upstream = await startUpstream()
    const gateway = await gatewayFor(upstream.url)
    for (const raw of ['not json', '{"model":"m","stream":"yes"}', '{"model":{"x":1}}', '[]']) {
      const response = await chat(gateway.url, '', raw)
      expect(response.status, raw).toBe(400)
      const json = (await response.json()) as { error: { type: string } }
      expect(json.error.type, raw).toBe('invalid_request_error')
    }
    expect(upstream.bodies).toEqual([])
  })
})
