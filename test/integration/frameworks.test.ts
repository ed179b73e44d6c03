/**
 * What each framework adds around the relay, with the framework itself on 127.0.0.1 and the
 * official SDKs as clients: headers the framework's plugins or middleware set reach the
 * relayed head, the framework writes nothing after the relay, and streaming and non-streaming
 * requests get the whole answer after a retry on every stack (gateways.test.ts runs the whole
 * gateway suite on each too).
 */
import Anthropic from '@anthropic-ai/sdk'
import Fastify from 'fastify'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import type { GatewayConfig } from '../../examples/node-http-gateway.js'
import { createMemoryKeyPool, openaiChat, relay } from '../../src/index.js'
import { fastifySink, nodeHttpAttempt, nodeSink, readNodeRequest } from '../../src/node.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import {
  type RunningGateway,
  startExpressGateway,
  startFastifyGateway,
  startHonoGateway,
  startNextRoutes,
  startWorker,
} from '../support/gateways.js'

const answer = 'The quick brown fox jumps over the lazy dog.'
const messages = [{ role: 'user' as const, content: 'Say the pangram.' }]
const keys = [
  { id: 'key-a', secret: 'sk-framework-a' },
  { id: 'key-b', secret: 'sk-framework-b' },
]

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

type Start = (config: Omit<GatewayConfig, 'port'>) => Promise<RunningGateway>

async function setup(start: Start, scenario: Scenario) {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const upstreamUrl = await upstream.listen()
  cleanups.push(() => upstream.close())
  const gateway = await start({
    openaiBaseUrl: `${upstreamUrl}/v1`,
    anthropicBaseUrl: upstreamUrl,
    keys,
    policy: {
      backoff: { baseMs: 10 },
      peek: { firstByteTimeoutMs: 500, firstOutputTimeoutMs: 800 },
    },
  })
  cleanups.push(() => gateway.close())
  const defaultHeaders = { 'x-fault-scenario': 's' }
  return {
    upstream,
    gateway,
    openai: new OpenAI({
      apiKey: 'sk-client',
      baseURL: `${gateway.url}/v1`,
      maxRetries: 0,
      defaultHeaders,
    }),
    anthropic: new Anthropic({
      apiKey: 'sk-client',
      baseURL: gateway.url,
      maxRetries: 0,
      defaultHeaders,
    }),
  }
}

const stacks: [string, Start][] = [
  ['Fastify', startFastifyGateway],
  ['Express', startExpressGateway],
  ['Next.js route handlers', startNextRoutes],
  ['Hono', startHonoGateway],
  ['the Cloudflare Worker (on Node; workerd in scripts/workerd-smoke.mjs)', startWorker],
]

describe.each(stacks)('%s: the official SDKs, streaming and not', (_, start) => {
  it('OpenAI Chat stream, empty then ok: the whole answer, once', async () => {
    const { openai, upstream } = await setup(start, ['empty', 'ok'])
    const stream = await openai.chat.completions.create({ model: 'm', messages, stream: true })
    let text = ''
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
    expect(text).toBe(answer)
    expect(upstream.requests.map((request) => request.fault)).toEqual(['empty', 'ok'])
  })

  it('Anthropic Messages stream, error-frame then ok: the whole message, once', async () => {
    const { anthropic, upstream } = await setup(start, ['error-frame', 'ok'])
    const message = await anthropic.messages
      .stream({ model: 'c', max_tokens: 64, messages })
      .finalMessage()
    expect(message.content.map((block) => (block.type === 'text' ? block.text : '')).join('')).toBe(
      answer,
    )
    expect(message.stop_reason).toBe('end_turn')
    expect(upstream.requests.map((request) => request.fault)).toEqual(['error-frame', 'ok'])
  })

  it('OpenAI Chat, html-500 then ok: the whole completion, after one retry', async () => {
    const { openai, upstream } = await setup(start, ['html-500', 'ok'])
    const completion = await openai.chat.completions.create({ model: 'm', messages, stream: false })
    expect(completion.choices[0]?.message.content).toBe(answer)
    expect(upstream.requests.map((request) => request.fault)).toEqual(['html-500', 'ok'])
  })

  it('Anthropic Messages, overloaded then ok: the whole message, after one retry', async () => {
    const { anthropic, upstream } = await setup(start, ['overloaded', 'ok'])
    const message = await anthropic.messages.create({ model: 'c', max_tokens: 64, messages })
    expect(message.content.map((block) => (block.type === 'text' ? block.text : '')).join('')).toBe(
      answer,
    )
    expect(upstream.requests.map((request) => request.fault)).toEqual(['overloaded', 'ok'])
  })
})

describe.each([
  ['Fastify (@fastify/cors on the reply, fastifySink)', startFastifyGateway],
  ['Express (a middleware setting res headers, nodeSink)', startExpressGateway],
])('%s: headers the framework set reach every answer', (_, start) => {
  const origin = { origin: 'https://app.example' }
  it.each([
    ['a relayed stream', { model: 'm', messages, stream: true }, 200],
    ['a relayed whole answer', { model: 'm', messages, stream: false }, 200],
    ['a 400 from readNodeRequest', { model: 7, messages }, 400],
  ])('%s', async (_, body, status) => {
    const { gateway } = await setup(start, ['ok'])
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-fault-scenario': 's', ...origin },
      body: JSON.stringify(body),
    })
    expect(response.status).toBe(status)
    expect(response.headers.get('access-control-allow-origin')).toMatch(
      /^(https:\/\/app\.example|\*)$/,
    )
    const text = await response.text()
    if (status === 200) expect(text).toContain('lazy')
  })
})

describe('Fastify: the reply belongs to the relay', () => {
  async function fastifyRelay(after: 'throw' | 'return-value', sinkOf: 'fastifySink' | 'nodeSink') {
    const upstream = createFaultyUpstream({ scenarios: { s: ['empty', 'ok'] } })
    const upstreamUrl = await upstream.listen()
    cleanups.push(() => upstream.close())
    const app = Fastify()
    const handled: unknown[] = []
    app.setErrorHandler((error, _request, reply) => {
      handled.push(error)
      return reply.code(500).send({ error: 'from the error handler' })
    })
    app.addHook('onRequest', async (_request, reply) => {
      reply.header('x-plugin-header', 'kept')
    })
    const pool = createMemoryKeyPool(keys)
    app.post('/v1/chat/completions', async (request, reply) => {
      const sink = sinkOf === 'fastifySink' ? fastifySink(reply) : nodeSink(reply.raw)
      const body = await readNodeRequest(request.raw, reply.raw, { adapter: openaiChat })
      if (body === undefined) return
      await relay({
        sink,
        pool,
        adapter: openaiChat,
        request: { url: `${upstreamUrl}/v1/chat/completions`, body },
        attempt: nodeHttpAttempt({
          clientHeaders: request.headers,
          forwardHeaders: ['x-fault-scenario'],
        }),
      })
      if (after === 'throw') throw new Error('the host failed after the relay')
      return { not: 'sent' }
    })
    app.removeAllContentTypeParsers()
    app.addContentTypeParser('*', (_request, _payload, done) => done(null))
    const url = await app.listen({ port: 0, host: '127.0.0.1' })
    cleanups.push(() => app.close())
    const openai = new OpenAI({
      apiKey: 'sk-client',
      baseURL: `${url}/v1`,
      maxRetries: 0,
      defaultHeaders: { 'x-fault-scenario': 's' },
    })
    const { data, response } = await openai.chat.completions
      .create({ model: 'm', messages, stream: true })
      .withResponse()
    let text = ''
    for await (const chunk of data) text += chunk.choices[0]?.delta?.content ?? ''
    return { text, headers: response.headers, handled }
  }

  it.each(['throw', 'return-value'] as const)(
    'a handler that %s after the relay: the client has the whole stream and Fastify writes nothing more',
    async (after) => {
      const { text, headers, handled } = await fastifyRelay(after, 'fastifySink')
      expect(text).toBe(answer)
      expect(headers.get('x-plugin-header')).toBe('kept')
      expect(headers.get('content-type')).toMatch(/^text\/event-stream/)
      // Fastify may log the hijacked handler's error; its error handler never runs to write.
      expect(handled).toEqual([])
    },
  )

  it.each([
    ['fastifySink', 0],
    // The response went out: Fastify sees it sent and leaves its error handler out.
    ['nodeSink', 0],
  ] as const)(
    "relay() rejecting a bad option with %s: the client gets a 500 in its protocol (never a reset), and Fastify's error handler runs %i times",
    async (sinkOf, runs) => {
      const app = Fastify()
      const handled: unknown[] = []
      app.setErrorHandler((error, _request, reply) => {
        handled.push(error)
        return reply.code(500).send({ error: 'from the error handler' })
      })
      app.post('/', async (_request, reply) => {
        const sink = sinkOf === 'fastifySink' ? fastifySink(reply) : nodeSink(reply.raw)
        await relay({
          sink,
          adapter: openaiChat,
          attempt: async () => new Response(''),
          policy: { maxAttempts: 0 },
        })
      })
      const url = await app.listen({ port: 0, host: '127.0.0.1' })
      cleanups.push(() => app.close())
      const answered = await fetch(url, { method: 'POST', body: '{}' })
      expect(answered.status).toBe(500)
      expect(answered.headers.get('x-should-retry')).toBe('false')
      const body = (await answered.json()) as { error: { message: string } }
      expect(body.error.message).toMatch(/misconfigured: maxAttempts/)
      await new Promise((resolve) => setTimeout(resolve, 50))
      expect(handled).toHaveLength(runs)
    },
  )

  it("without fastifySink (nodeSink on reply.raw) a plugin's header is lost: why fastifySink exists", async () => {
    const { text, headers } = await fastifyRelay('return-value', 'nodeSink')
    expect(text).toBe(answer)
    expect(headers.get('x-plugin-header')).toBeNull()
  })
})
