import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { startGateway } from '../../examples/node-http-gateway.js'
import { createFaultyUpstream, type Scenario } from '../../src/testing/faulty-upstream.js'

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
