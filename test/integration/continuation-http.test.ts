import { Agent, createServer, request as httpRequest } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { startGateway } from '../../examples/node-http-gateway.js'
import {
  anthropicMessages,
  createMemoryKeyPool,
  openaiChatWith,
  type RelayOutcome,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { clientSignal, nodeResponse, nodeSink } from '../../src/node.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { leaseTotals } from '../support/leases.js'
import { withBody } from '../support/loopback.js'

/**
 * `continueAfterCut` end to end over real HTTP on 127.0.0.1: the official SDKs, the example
 * gateway (node:http, its own upstream client) and the faulty upstream on its own port, which
 * continues a prefilled answer as Anthropic and vLLM do.
 */

const answer = 'The quick brown fox jumps over the lazy dog.'
const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

async function start(scenario: Scenario) {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const upstreamUrl = await upstream.listen()
  cleanups.push(() => upstream.close())
  const gateway = await startGateway({
    openaiBaseUrl: `${upstreamUrl}/v1`,
    anthropicBaseUrl: upstreamUrl,
    keys: [
      { id: 'a', secret: 'sk-http-a-not-real' },
      { id: 'b', secret: 'sk-http-b-not-real' },
    ],
    policy: { continueAfterCut: true, backoff: { baseMs: 5 } },
    openaiContinuation: 'vllm-continue',
  })
  cleanups.push(() => gateway.close())
  return { upstream, gateway, headers: { 'x-fault-scenario': 's' } }
}

async function outcomeOf(gateway: Awaited<ReturnType<typeof start>>['gateway']) {
  for (let i = 0; i < 100 && gateway.outcomes.length === 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  return gateway.outcomes[0]
}

describe('continueAfterCut over HTTP through the example gateway', () => {
  for (const fault of [
    'partial-then-cut',
    'eof-mid-frame',
    'eof-mid-frame-close',
    'reset-mid-frame',
  ] as const) {
    it(`Anthropic SDK: ${fault} is answered whole, the prefill trimmed and its space not repeated`, async () => {
      const { upstream, gateway, headers } = await start([fault, 'ok'])
      const client = new Anthropic({
        apiKey: 'sk-client',
        baseURL: gateway.url,
        maxRetries: 0,
        defaultHeaders: headers,
      })
      const stream = client.messages.stream({
        model: 'claude-test',
        max_tokens: 64,
        messages: [{ role: 'user', content: 'hi' }],
      })
      const deltas: string[] = []
      stream.on('text', (delta) => deltas.push(delta))
      const message = await stream.finalMessage()
      expect(message.content).toEqual([{ type: 'text', text: answer }])
      expect(deltas.join('')).toBe(answer)
      expect(message.stop_reason).toBe('end_turn')
      expect(upstream.requests).toHaveLength(2)
      const prefill = JSON.parse(upstream.requests[1]?.body ?? '{}').messages.at(-1)
      expect(prefill.role).toBe('assistant')
      expect(answer.startsWith(prefill.content)).toBe(true)
      expect(prefill.content).toBe(prefill.content.trimEnd())
      // The continuation went out on a key (never the client's own credential).
      expect(upstream.requests[1]?.headers['x-api-key']).toBe('[redacted]')
      expect(await outcomeOf(gateway)).toMatchObject({
        kind: 'committed',
        end: { kind: 'completed' },
        continuations: [{ result: 'spliced' }],
      })
    })
  }

  it('OpenAI SDK (vllm-continue): partial-then-cut is answered whole', async () => {
    const { upstream, gateway, headers } = await start(['partial-then-cut', 'ok'])
    const client = new OpenAI({
      apiKey: 'sk-client',
      baseURL: `${gateway.url}/v1`,
      maxRetries: 0,
      defaultHeaders: headers,
    })
    const completion = await client.chat.completions
      .stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
      .finalChatCompletion()
    expect(completion.choices[0]?.message.content).toBe(answer)
    const second = JSON.parse(upstream.requests[1]?.body ?? '{}')
    expect(second).toMatchObject({ continue_final_message: true, add_generation_prompt: false })
  })
})

/**
 * A hand-written gateway as a user first writes it: it reads the body, then its attempt sends
 * that body (not `context.request`), by `fetch` or by `node:http`, so a continuation goes out
 * without its prefill and the model answers from the start.
 */
async function capturedBodyGateway(
  adapter: StreamAdapter,
  upstreamUrl: string,
  transport: 'fetch' | 'node:http',
) {
  const pool = createMemoryKeyPool([
    { id: 'a', secret: 'sk-http-a-not-real' },
    { id: 'b', secret: 'sk-http-b-not-real' },
  ])
  const agent = new Agent({ keepAlive: true })
  const outcomes: RelayOutcome[] = []
  const server = createServer((req, res) => {
    withBody(req, async (body) => {
      const target = `${upstreamUrl}${req.url ?? ''}`
      const headers = { 'content-type': 'application/json', 'x-fault-scenario': 's' }
      outcomes.push(
        await relay({
          sink: nodeSink(res),
          signal: clientSignal(req, res),
          pool,
          adapter,
          request: { url: target, body: JSON.parse(body) },
          policy: { continueAfterCut: true, backoff: { baseMs: 5 } },
          attempt: ({ signal }) =>
            transport === 'fetch'
              ? fetch(target, { method: 'POST', headers, body, signal, redirect: 'manual' })
              : new Promise<Response>((resolve, reject) => {
                  const sent = httpRequest(
                    target,
                    { method: 'POST', headers, agent, signal },
                    (r) => resolve(nodeResponse(r)),
                  )
                  sent.once('error', reject)
                  sent.end(body)
                }),
        }),
      )
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  cleanups.push(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
    agent.destroy()
  })
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, pool, outcomes }
}

describe('continueAfterCut over HTTP with an attempt that sends the body it read', () => {
  for (const transport of ['fetch', 'node:http'] as const) {
    it(`Anthropic SDK, ${transport} attempt: the restarted answer is never appended, the honest error instead`, async () => {
      const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
      const upstreamUrl = await upstream.listen()
      cleanups.push(() => upstream.close())
      const gateway = await capturedBodyGateway(anthropicMessages, upstreamUrl, transport)
      const client = new Anthropic({ apiKey: 'sk-client', baseURL: gateway.url, maxRetries: 0 })
      let text = ''
      const stream = client.messages
        .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
        .on('text', (delta) => {
          text += delta
        })
      await expect(stream.finalMessage()).rejects.toThrow(/incomplete/)
      expect(text).toBe('The quick brown fox ')
      expect(upstream.requests).toHaveLength(2)
      await expect.poll(() => gateway.outcomes.length).toBe(1)
      expect(gateway.outcomes[0]).toMatchObject({
        end: { kind: 'error-written' },
        continuations: [{ result: 'restarted' }],
      })
      await expect
        .poll(() => leaseTotals(gateway.pool))
        .toEqual({ inflight: 0, leased: 2, reported: 2 })
    })

    it(`OpenAI SDK (vllm-continue), ${transport} attempt: the restarted answer is never appended`, async () => {
      const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
      const upstreamUrl = await upstream.listen()
      cleanups.push(() => upstream.close())
      const adapter = openaiChatWith({ continuation: 'vllm-continue' })
      const gateway = await capturedBodyGateway(adapter, upstreamUrl, transport)
      const client = new OpenAI({
        apiKey: 'sk-client',
        baseURL: `${gateway.url}/v1`,
        maxRetries: 0,
      })
      let text = ''
      const stream = client.chat.completions
        .stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
        .on('content', (delta) => {
          text += delta
        })
      await expect(stream.finalChatCompletion()).rejects.toThrow(/incomplete/)
      expect(text).toBe('The quick brown fox ')
      await expect.poll(() => gateway.outcomes.length).toBe(1)
      expect(gateway.outcomes[0]).toMatchObject({ continuations: [{ result: 'restarted' }] })
    })
  }
})
