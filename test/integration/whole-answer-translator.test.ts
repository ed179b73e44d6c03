import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  type DownstreamOptions,
  fetchAttempt,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
} from '../../src/index.js'
import { fastifySink } from '../../src/node.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * A translating gateway on Fastify (Anthropic Messages clients, an OpenAI Chat upstream) whose
 * translator is `Response → Response` and converts whole JSON answers as well as streams, as
 * `@musistudio/llms`'s does. A non-streaming request goes through it too; and an option error
 * found once `fastifySink` has taken the reply is answered in the client's protocol, never a
 * cut socket.
 */

const loopback = useLoopback()
const apps: FastifyInstance[] = []
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close()
})

const chatAnswer = {
  id: 'chatcmpl-whole',
  object: 'chat.completion',
  model: 'gpt-x',
  choices: [
    { index: 0, message: { role: 'assistant', content: 'Hello whole' }, finish_reason: 'stop' },
  ],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
}

/** The gateway's translator: a whole Chat answer to an Anthropic message (streams are not driven here). */
async function toAnthropic(response: Response): Promise<Response> {
  if (!response.headers.get('content-type')?.includes('application/json')) return response
  const chat = (await response.json()) as typeof chatAnswer
  return new Response(
    JSON.stringify({
      id: chat.id,
      type: 'message',
      role: 'assistant',
      model: chat.model,
      content: [{ type: 'text', text: chat.choices[0]?.message.content }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: {
        input_tokens: chat.usage.prompt_tokens,
        output_tokens: chat.usage.completion_tokens,
      },
    }),
    { headers: { 'content-type': 'application/json' } },
  )
}

async function startUpstream() {
  const seen: string[] = []
  const url = await loopback.listen(
    createServer((req, res) => {
      withBody(req, (body) => {
        seen.push(body)
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify(chatAnswer))
      })
    }),
  )
  return { url, seen }
}

async function startGateway(upstream: string, policy: RelayPolicy) {
  const outcomes: RelayOutcome[] = []
  const rejected: unknown[] = []
  const app = Fastify()
  apps.push(app)
  app.post('/v1/messages', async (request, reply) => {
    const sink = fastifySink(reply)
    const body = request.body as { stream?: boolean; messages: unknown[]; max_tokens: number }
    await relay({
      sink,
      pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-whole-translator-123456' }]),
      adapter: openaiChat,
      request: {
        url: `${upstream}/v1/chat/completions`,
        body: { model: 'gpt-x', messages: body.messages, stream: body.stream === true },
      },
      attempt: fetchAttempt(),
      policy,
    }).then(
      (outcome) => outcomes.push(outcome),
      (error: unknown) => rejected.push(error),
    )
  })
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  return { url, outcomes, rejected }
}

const ask = (url: string) =>
  new Anthropic({ baseURL: url, apiKey: 'client', maxRetries: 0 }).messages.create({
    model: 'claude-x',
    max_tokens: 32,
    messages: [{ role: 'user', content: 'hi' }],
  })

describe('a whole-answer translator on Fastify', () => {
  it('a non-streaming request goes through translateResponse: the client gets its own protocol', async () => {
    const upstream = await startUpstream()
    const gateway = await startGateway(upstream.url, {
      downstream: { adapter: anthropicMessages, translateResponse: toAnthropic },
    })
    const message = await ask(gateway.url)
    expect(message.content).toEqual([{ type: 'text', text: 'Hello whole' }])
    expect(message.usage).toMatchObject({ input_tokens: 3, output_tokens: 2 })
    expect(gateway.rejected).toEqual([])
    expect(gateway.outcomes[0]).toMatchObject({ kind: 'committed', ok: true, result: 'completed' })
    expect(upstream.seen).toHaveLength(1)
  })

  it('a translator that throws on a whole answer: a 500 in the client protocol, the upstream asked once', async () => {
    const upstream = await startUpstream()
    const gateway = await startGateway(upstream.url, {
      downstream: {
        adapter: anthropicMessages,
        translateResponse: () => {
          throw new Error('sk-whole-translator-123456 broke')
        },
      },
    })
    const failed = await ask(gateway.url).catch((error: unknown) => error)
    expect(failed).toBeInstanceOf(Anthropic.InternalServerError)
    expect((failed as InstanceType<typeof Anthropic.APIError>).message).toMatch(
      /downstream\.translateResponse threw/,
    )
    expect(String((failed as Error).message)).not.toContain('sk-whole')
    expect(gateway.outcomes[0]).toMatchObject({ kind: 'failed', status: 500, result: 'failed' })
  })

  it.each([
    ['a stream translator for a non-streaming request', { translateFrames: async function* () {} }],
    ['a bad option', { translateResponse: toAnthropic, keepAlive: 'sometimes' }],
  ])(
    '%s after fastifySink took the reply: a 500 in the client protocol, not a cut socket',
    async (_, downstream) => {
      const upstream = await startUpstream()
      const gateway = await startGateway(upstream.url, {
        downstream: { adapter: anthropicMessages, ...downstream } as DownstreamOptions,
      })
      const failed = await ask(gateway.url).catch((error: unknown) => error)
      // The SDK parsed an Anthropic error body: the socket was answered, not cut.
      expect(failed).toBeInstanceOf(Anthropic.InternalServerError)
      expect((failed as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
        type: 'error',
        error: { type: 'api_error' },
      })
      expect((failed as Error).message).toMatch(/misconfigured/)
      await expect.poll(() => gateway.rejected.length).toBe(1)
      expect(gateway.rejected[0]).toBeInstanceOf(TypeError)
      expect(upstream.seen).toHaveLength(0)
    },
  )
})
