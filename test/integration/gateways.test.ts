import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { type GatewayConfig, startGateway } from '../../examples/node-http-gateway.js'
import { main as wrapFetchMain } from '../../examples/wrap-fetch.js'
import type { PoolKey, RelayPolicy } from '../../src/index.js'
import { serveFetch } from '../../src/node.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import {
  type RunningGateway,
  startExpressGateway,
  startFastifyGateway,
  startHonoGateway,
  startNextRoutes,
} from '../support/gateways.js'

const answer = 'The quick brown fox jumps over the lazy dog.'
const reasoning = 'Let me think about this step by step.'
const keys: PoolKey[] = [
  { id: 'key-a', secret: 'sk-gateway-a' },
  { id: 'key-b', secret: 'sk-gateway-b' },
]
const fastPolicy: RelayPolicy = {
  peek: { firstByteTimeoutMs: 500, firstOutputTimeoutMs: 800 },
  backoff: { baseMs: 10 },
}

type StartGateway = (config: Omit<GatewayConfig, 'port'>) => Promise<RunningGateway>

const startNodeGateway: StartGateway = (config) => startGateway(config)

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

/** A faulty upstream on 127.0.0.1, a gateway in front of it, and both SDKs pointed at the gateway. */
async function setup(start: StartGateway, scenario: Scenario, policy: RelayPolicy = {}) {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const upstreamUrl = await upstream.listen()
  cleanups.push(() => upstream.close())
  const gateway = await start({
    openaiBaseUrl: `${upstreamUrl}/v1`,
    anthropicBaseUrl: upstreamUrl,
    keys,
    policy: { ...fastPolicy, ...policy },
  })
  cleanups.push(() => gateway.close())
  const defaultHeaders = { 'x-fault-scenario': 's' }
  const openai = new OpenAI({
    apiKey: 'sk-client-own-key',
    baseURL: `${gateway.url}/v1`,
    maxRetries: 0,
    defaultHeaders,
  })
  const anthropic = new Anthropic({
    apiKey: 'sk-ant-client-own-key',
    baseURL: gateway.url,
    maxRetries: 0,
    defaultHeaders,
  })
  return { upstream, gateway, openai, anthropic }
}

const messages = [{ role: 'user' as const, content: 'Say the pangram.' }]

/** Streams a chat completion; `text` keeps what arrived even when the stream then fails. */
async function chat(openai: OpenAI, received: { text: string } = { text: '' }): Promise<string> {
  const stream = await openai.chat.completions.create({ model: 'm', messages, stream: true })
  for await (const chunk of stream) received.text += chunk.choices[0]?.delta?.content ?? ''
  return received.text
}

async function message(anthropic: Anthropic) {
  const final = await anthropic.messages
    .stream({ model: 'claude-test', max_tokens: 64, messages })
    .finalMessage()
  return {
    text: final.content.map((block) => (block.type === 'text' ? block.text : '')).join(''),
    blocks: final.content.map((block) => block.type),
    stopReason: final.stop_reason,
  }
}

async function committed(gateway: RunningGateway) {
  await vi.waitFor(() => expect(gateway.outcomes).toHaveLength(1))
  const outcome = gateway.outcomes[0]
  if (outcome?.kind !== 'committed') throw new Error(`expected a commit, got ${outcome?.kind}`)
  return outcome
}

const preOutputFaults = [
  'empty',
  'headers-then-hang',
  'keepalives-only',
  'role-only-then-stall',
  'error-frame',
  'overloaded',
  'html-500',
  'json-error-200',
] as const

function gatewaySuite(start: StartGateway) {
  describe('a fault before the first output is invisible to the SDK user', () => {
    it.each(preOutputFaults)('OpenAI Chat, %s then ok: the whole answer, once', async (fault) => {
      const { openai, upstream, gateway } = await setup(start, [fault, 'ok'])
      expect(await chat(openai)).toBe(answer)
      expect(upstream.requests.map((request) => request.fault)).toEqual([fault, 'ok'])
      const outcome = await committed(gateway)
      expect(outcome.attempts.map((attempt) => attempt.result)).toEqual([
        expect.not.stringMatching(/^committed$/),
        'committed',
      ])
      expect(outcome.eof?.kind).toBe('completed')
      expect(outcome.end.kind).toBe('completed')
    })

    it.each(preOutputFaults)(
      'Anthropic Messages, %s then ok: the whole answer, once',
      async (fault) => {
        const { anthropic, upstream } = await setup(start, [fault, 'ok'])
        const result = await message(anthropic)
        expect(result.text).toBe(answer)
        expect(result.stopReason).toBe('end_turn')
        expect(upstream.requests.map((request) => request.fault)).toEqual([fault, 'ok'])
      },
    )

    it('rate-limited key A: key B is used at once, not after the retry-after', async () => {
      const { openai, anthropic, upstream, gateway } = await setup(start, [
        { kind: 'rate-limited', retryAfterSeconds: 5 },
        'ok',
      ])
      expect(await chat(openai)).toBe(answer)
      const outcome = await committed(gateway)
      const [first, second] = outcome.attempts
      expect(first?.status).toBe(429)
      expect(second?.result).toBe('committed')
      expect(second?.keyId).not.toBe(first?.keyId)
      expect(outcome.timeToFirstOutputMs).toBeLessThan(1000)

      upstream.reset()
      const started = performance.now()
      const result = await message(anthropic)
      expect(result.text).toBe(answer)
      expect(performance.now() - started).toBeLessThan(1000)
      expect(upstream.requests.map((request) => request.fault)).toEqual(['rate-limited', 'ok'])
    })

    it('OpenAI Responses, empty then ok: the whole answer, once', async () => {
      const { openai, upstream } = await setup(start, ['empty', 'ok'])
      const stream = await openai.responses.create({ model: 'm', input: 'hi', stream: true })
      let text = ''
      let completed = false
      for await (const event of stream) {
        if (event.type === 'response.output_text.delta') text += event.delta
        if (event.type === 'response.completed') completed = true
      }
      expect(text).toBe(answer)
      expect(completed).toBe(true)
      expect(upstream.requests).toHaveLength(2)
    })
  })

  // `reset-mid-frame` is post-commit only if the upstream's server flushes the frames it wrote
  // before cutting the connection (src/node.ts serveFetch); otherwise the gateway sees no output,
  // retries, and these tests fail on a whole answer.
  describe('a fault after the first output ends with an honest error', () => {
    it.each([
      ['partial-then-cut', /ended before its final event/],
      ['reset-mid-frame', /connection to the upstream was lost/],
      ['eof-mid-frame', /ended in the middle of an event/],
      ['eof-mid-frame-close', /ended in the middle of an event/],
    ] as const)('OpenAI Chat, %s: an APIError, never a normal finish', async (fault, text) => {
      const { openai, upstream } = await setup(start, [fault, 'ok'])
      const received = { text: '' }
      const error = await chat(openai, received).then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(error).toBeInstanceOf(OpenAI.APIError)
      expect((error as Error).message).toMatch(text)
      expect(received.text.length).toBeGreaterThan(0)
      expect(answer.startsWith(received.text)).toBe(true)
      expect(received.text).not.toBe(answer)
      expect(upstream.requests).toHaveLength(1)
    })

    it.each([
      ['partial-then-cut', /ended before its final event/],
      ['reset-mid-frame', /connection to the upstream was lost/],
      ['eof-mid-frame', /ended in the middle of an event/],
      ['eof-mid-frame-close', /ended in the middle of an event/],
    ] as const)('Anthropic Messages, %s: an error, never a final message', async (fault, text) => {
      const { anthropic, upstream } = await setup(start, [fault, 'ok'])
      await expect(message(anthropic)).rejects.toThrow(text)
      expect(upstream.requests).toHaveLength(1)
    })
  })

  describe('when every attempt fails before commit the SDK sees a real status', () => {
    it('html-500 on both attempts: 502', async () => {
      const { openai, anthropic, upstream } = await setup(start, ['html-500'], { maxAttempts: 2 })
      await expect(chat(openai)).rejects.toMatchObject({ status: 502 })
      expect(upstream.requests).toHaveLength(2)
      await expect(message(anthropic)).rejects.toMatchObject({ status: 502 })
      expect(upstream.requests).toHaveLength(4)
    })

    it('fatal-error-frame: 400 and no retry', async () => {
      const { openai, anthropic, upstream } = await setup(start, ['fatal-error-frame'])
      const error = await chat(openai).catch((error: unknown) => error)
      expect(error).toBeInstanceOf(OpenAI.BadRequestError)
      expect(error).toMatchObject({ status: 400 })
      expect(upstream.requests).toHaveLength(1)
      await expect(message(anthropic)).rejects.toMatchObject({ status: 400 })
      expect(upstream.requests).toHaveLength(2)
    })
  })

  describe('reasoning with no answer, under onThinkingOnly: promote-reasoning', () => {
    it('OpenAI Chat: the reasoning arrives as the text', async () => {
      const { openai } = await setup(start, ['thinking-only'], {
        onThinkingOnly: 'promote-reasoning',
      })
      expect(await chat(openai)).toBe(reasoning)
    })

    it('Anthropic Messages: a text block holding the reasoning, ended normally', async () => {
      const { anthropic } = await setup(start, ['thinking-only'], {
        onThinkingOnly: 'promote-reasoning',
      })
      const result = await message(anthropic)
      expect(result.text).toBe(reasoning)
      expect(result.blocks).toEqual(['thinking', 'text'])
      expect(result.stopReason).toBe('end_turn')
    })
  })

  describe('credentials and routes', () => {
    it("the gateway's keys replace the client's credential, streaming or not", async () => {
      const upstream = createFaultyUpstream({ scenarios: { s: ['html-500', 'ok'] } })
      const seen: { path: string; authorization: string | null; apiKey: string | null }[] = []
      const recorder = await serveFetch((request) => {
        seen.push({
          path: new URL(request.url).pathname,
          authorization: request.headers.get('authorization'),
          apiKey: request.headers.get('x-api-key'),
        })
        return upstream.handle(request)
      })
      cleanups.push(
        () => upstream.close(),
        () => recorder.close(),
      )
      const gateway = await start({
        openaiBaseUrl: `${recorder.url}/v1`,
        anthropicBaseUrl: recorder.url,
        keys,
        policy: fastPolicy,
      })
      cleanups.push(() => gateway.close())

      const plain = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: 'Bearer sk-client-own-key',
          'x-fault-scenario': 's',
        },
        body: JSON.stringify({ model: 'm', messages }),
      })
      expect(plain.status).toBe(200)
      expect(await plain.text()).toContain('lazy ')
      upstream.reset()
      const anthropic = new Anthropic({
        apiKey: 'sk-ant-client-own-key',
        baseURL: gateway.url,
        maxRetries: 0,
        defaultHeaders: { 'x-fault-scenario': 's' },
      })
      expect((await message(anthropic)).text).toBe(answer)

      const bearer = expect.stringMatching(/^Bearer sk-gateway-[ab]$/)
      const apiKey = expect.stringMatching(/^sk-gateway-[ab]$/)
      expect(seen).toEqual([
        { path: '/v1/chat/completions', authorization: bearer, apiKey: null },
        { path: '/v1/chat/completions', authorization: bearer, apiKey: null },
        { path: '/v1/messages', authorization: null, apiKey },
        { path: '/v1/messages', authorization: null, apiKey },
      ])
      // Each retry moved to the other key.
      expect(seen[1]?.authorization).not.toBe(seen[0]?.authorization)
      expect(seen[3]?.apiKey).not.toBe(seen[2]?.apiKey)
    })

    it('an unknown route is a 404 with a JSON body', async () => {
      const { gateway } = await setup(start, ['ok'])
      const response = await fetch(`${gateway.url}/v1/embeddings`, { method: 'POST', body: '{}' })
      expect(response.status).toBe(404)
      expect(await response.json()).toMatchObject({ error: { type: 'not_found' } })
    })
  })
}

describe('examples/node-http-gateway.ts behind the official SDKs', () => {
  gatewaySuite(startNodeGateway)
})

describe('examples/hono-gateway.ts (webSink, @hono/node-server) behind the official SDKs', () => {
  gatewaySuite(startHonoGateway)
})

describe('examples/fastify-gateway.ts (fastifySink, a hijacked reply) behind the official SDKs', () => {
  gatewaySuite(startFastifyGateway)
})

describe('examples/express-gateway.ts (nodeSink on Express) behind the official SDKs', () => {
  gatewaySuite(startExpressGateway)
})

describe('examples/next-route.ts (App Router route handlers, called with real Requests) behind the official SDKs', () => {
  gatewaySuite(startNextRoutes)
})

describe('examples/wrap-fetch.ts', () => {
  it('main() prints the whole answer after a retried empty first attempt', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {})
    try {
      await wrapFetchMain()
      const lines = log.mock.calls.map((call) => call.join(' '))
      expect(lines).toContain(`text: ${answer}`)
      expect(lines).toContain('attempt 1 (key caller): empty')
      expect(lines).toContain('attempt 2 (key caller): committed')
    } finally {
      log.mockRestore()
    }
  })
})
