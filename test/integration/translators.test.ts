import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import { describe, expect, it } from 'vitest'
import {
  anthropicDownstream,
  anthropicToOpenaiRequest,
  openaiChunkToAnthropic,
  openaiToAnthropic,
  openaiToAnthropicResponse,
  openaiToAnthropicStream,
  type TranslatorForm,
} from '../../examples/anthropic-over-openai-gateway.js'
import {
  anthropicMessages,
  type DownstreamOptions,
  giveUpResponse,
  openaiChat,
  type RelayOutcome,
  relay,
  type SseFrame,
} from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { type ChatScript, chunk, done, startChatUpstream } from '../support/chat-upstream.js'
import { useLoopback } from '../support/loopback.js'

/**
 * Whole-stream translators inside the relay, in the three shapes gateways write them (an async
 * generator over frames, a `TransformStream`, `Response → Response`) and the per-frame
 * `transform`: the Anthropic SDK as the client, an OpenAI Chat upstream with faults, and a
 * translator written the natural way (no special care for cuts). Pre-output faults are
 * retried; a fault after output ends in Anthropic's error event, which the SDK raises; the
 * translator throwing ends honestly too; a client that leaves releases the upstream.
 */

const { listen, cleanup } = useLoopback()

type Form = TranslatorForm
const forms: readonly Form[] = ['frames', 'stream', 'response', 'per-frame']

const adapter = anthropicMessages

/** The same translator, made to throw once it has seen `after` frames (or chunks). */
function throwingTranslatorFor(form: Form, after: number): DownstreamOptions {
  const boom = () => new Error('the translator broke')
  switch (form) {
    case 'frames':
      return {
        adapter,
        translateFrames: async function* (frames) {
          let seen = 0
          const counted = (async function* () {
            for await (const frame of frames) {
              if (++seen > after) throw boom()
              yield frame
            }
          })()
          yield* openaiToAnthropic(counted)
        },
      }
    case 'stream':
      return {
        adapter,
        translateStream: () => {
          const inner = openaiToAnthropicStream()
          let seen = 0
          const gate = new TransformStream<Uint8Array, Uint8Array>({
            transform(bytes, controller) {
              if (++seen > after) throw boom()
              controller.enqueue(bytes)
            },
          })
          return { writable: gate.writable, readable: gate.readable.pipeThrough(inner) }
        },
      }
    case 'response':
      return {
        adapter,
        translateResponse: (response) => {
          let seen = 0
          const counted = response.body?.pipeThrough(
            new TransformStream<Uint8Array, Uint8Array>({
              transform(bytes, controller) {
                if (++seen > after) throw boom()
                controller.enqueue(bytes)
              },
            }),
          )
          return openaiToAnthropicResponse(new Response(counted ?? null))
        },
      }
    case 'per-frame': {
      let seen = 0
      return {
        adapter,
        transform: (frame: SseFrame, context) => {
          if (++seen > after) throw boom()
          return openaiChunkToAnthropic(frame, context)
        },
      }
    }
  }
}

const answer = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Hello' }),
  chunk({ content: ', world' }),
  chunk({ content: ', how are you' }),
  chunk({}, 'stop'),
  done,
]

/** An Anthropic-speaking gateway over `upstream` whose relay translates with `downstream`. */
async function gateway(upstreamUrl: string, downstream: DownstreamOptions) {
  const outcomes: RelayOutcome[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (part: Buffer) => chunks.push(part))
    req.on('end', () => {
      const body = JSON.stringify(
        anthropicToOpenaiRequest(JSON.parse(Buffer.concat(chunks).toString('utf8')), 'gpt-test'),
      )
      void relay({
        sink: nodeSink(res),
        adapter: openaiChat,
        attempt: ({ signal }) =>
          fetch(`${upstreamUrl}/v1/chat/completions`, {
            method: 'POST',
            body,
            signal,
            headers: { 'content-type': 'application/json', authorization: 'Bearer sk-upstream' },
          }),
        policy: {
          maxAttempts: 3,
          backoff: { baseMs: 5, maxMs: 20 },
          peek: { firstByteTimeoutMs: 2_000, firstOutputTimeoutMs: 2_000 },
          downstream,
        },
      }).then((outcome) => outcomes.push(outcome))
    })
  })
  const url = await listen(server)
  const client = new Anthropic({ baseURL: url, apiKey: 'client-key', maxRetries: 0 })
  return { client, outcomes }
}

async function setup(scripts: readonly ChatScript[], downstream: DownstreamOptions) {
  const upstream = await startChatUpstream(scripts)
  cleanup(upstream.close)
  return { upstream, ...(await gateway(upstream.url, downstream)) }
}

const ask = {
  model: 'claude-test',
  max_tokens: 64,
  messages: [{ role: 'user' as const, content: 'Hi' }],
}

/** What the SDK's raw iteration got: the text, and the error it raised (if any). */
async function read(client: Anthropic): Promise<{ text: string; error: unknown }> {
  let text = ''
  try {
    const stream = await client.messages.create({ ...ask, stream: true })
    for await (const event of stream) {
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta')
        text += event.delta.text
    }
  } catch (error) {
    return { text, error }
  }
  return { text, error: undefined }
}

/** Half the answer, then the connection cut or the body ended after `tail`. */
const cutAfter = (tail: string, end: 'eof' | 'destroy'): ChatScript => ({
  frames: [...answer.slice(0, 3), tail],
  end,
})

describe.each(forms)('a %s translator inside the relay, Anthropic SDK over OpenAI Chat', (form) => {
  const downstream = anthropicDownstream(form)

  it('empty, then a good attempt: the whole answer', async () => {
    const { client, upstream } = await setup(
      [{ frames: [], end: 'eof' }, { frames: answer }],
      downstream,
    )
    const message = await client.messages.stream(ask).finalMessage()
    expect(message.content).toEqual([{ type: 'text', text: 'Hello, world, how are you' }])
    expect(message.stop_reason).toBe('end_turn')
    expect(upstream.requests).toBe(2)
  })

  it('429, then a good attempt: the whole answer', async () => {
    const { client, upstream } = await setup(
      [
        { status: 429, json: { error: { type: 'rate_limit_error', message: 'slow' } } },
        { frames: answer },
      ],
      downstream,
    )
    const message = await client.messages.stream(ask).finalMessage()
    expect(message.content).toEqual([{ type: 'text', text: 'Hello, world, how are you' }])
    expect(upstream.requests).toBe(2)
  })

  it.each([
    ['a cut between frames (the connection reset)', cutAfter('', 'destroy')],
    ['a clean EOF between frames, no finish reason', cutAfter('', 'eof')],
    ['a clean EOF inside a frame', cutAfter('data: {"choices":[{"delta":{"content":" and', 'eof')],
    ['a reset mid-frame', cutAfter('data: {"choices":[{"delta":{"content":" and', 'destroy')],
  ])(
    '%s after output: the SDK raises Anthropic’s error event, after the text it got',
    async (_, script) => {
      const { client, outcomes } = await setup([script], downstream)
      const got = await read(client)
      expect(got.text).toBe('Hello, world')
      expect(got.error).toBeInstanceOf(Error)
      expect(String(got.error)).not.toMatch(/choices|\[DONE\]/)
      await expect.poll(() => outcomes.length).toBe(1)
      expect(outcomes[0]).toMatchObject({ kind: 'committed', end: { kind: 'error-written' } })
    },
  )

  it('thinking only (reasoning, then EOF with no answer): an honest Anthropic error, never a silent empty message', async () => {
    const thinking: ChatScript = {
      frames: [
        chunk({ role: 'assistant', content: '' }),
        chunk({ reasoning_content: 'Let me think.' }),
      ],
      end: 'eof',
    }
    const { client } = await setup([thinking], downstream)
    const got = await read(client)
    expect(got.text).toBe('')
    expect(got.error).toBeInstanceOf(Error)
  })

  it('an upstream 400 with a request id: the SDK gets 400 in Anthropic’s shape, with the request id', async () => {
    const { client, upstream } = await setup(
      [{ status: 400, json: { error: { type: 'invalid_request_error', message: 'bad field' } } }],
      downstream,
    )
    const got = await read(client)
    expect(got.error).toBeInstanceOf(Anthropic.APIError)
    const error = got.error as InstanceType<typeof Anthropic.APIError>
    expect(error.status).toBe(400)
    expect(error.headers?.get('x-request-id')).toBe('req_upstream_1')
    expect(error.headers?.get('x-should-retry')).toBe('false')
    expect((error.error as { type?: string } | undefined)?.type).toBe('error')
    expect(error.message).toContain('bad field')
    expect(upstream.requests).toBe(1)
  })

  it('the translator throwing mid-stream: an honest Anthropic error, the relay settles once', async () => {
    const upstream = await startChatUpstream([{ frames: answer }])
    cleanup(upstream.close)
    const { client, outcomes } = await gateway(upstream.url, throwingTranslatorFor(form, 3))
    const got = await read(client)
    expect(got.error).toBeInstanceOf(Error)
    await expect.poll(() => outcomes.length).toBe(1)
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(outcomes).toHaveLength(1)
  })

  it('the client leaving mid-stream: the upstream is released within a second', async () => {
    const slow: ChatScript = {
      frames: [
        ...answer.slice(0, 3),
        ...Array.from({ length: 200 }, () => chunk({ content: '.' })),
      ],
      gapMs: 20,
    }
    const { client, upstream, outcomes } = await setup([slow], downstream)
    const controller = new AbortController()
    const stream = await client.messages.create(
      { ...ask, stream: true },
      { signal: controller.signal },
    )
    let leftAt = 0
    try {
      for await (const event of stream) {
        if (event.type === 'content_block_delta') {
          leftAt = performance.now()
          controller.abort()
        }
      }
    } catch {
      // The client's own abort.
    }
    await expect.poll(() => upstream.closedAt.length, { timeout: 2_000 }).toBe(1)
    expect((upstream.closedAt[0] as number) - leftAt).toBeLessThan(1_000)
    await expect.poll(() => outcomes[0]?.kind).toBe('committed')
    expect(outcomes[0]).toMatchObject({ end: { kind: 'client-gone' } })
  })
})

describe('translator options are checked', () => {
  it.each([
    [{ translateFrames: openaiToAnthropic }, /downstream.translateFrames needs downstream.adapter/],
    [
      { adapter, translateFrames: openaiToAnthropic, transform: openaiChunkToAnthropic },
      /downstream takes one translator, got downstream.transform and downstream.translateFrames/,
    ],
    [{ adapter, translateStream: 'no' }, /downstream.translateStream must be a function/],
  ])('%#: a TypeError before anything is sent', async (downstream, message) => {
    let sent = 0
    await expect(
      relay({
        sink: nodeSink(
          // A response that is never written: the options fail first.
          new (await import('node:http')).ServerResponse(
            new (await import('node:http')).IncomingMessage(
              new (await import('node:net')).Socket(),
            ),
          ),
        ),
        adapter: openaiChat,
        attempt: async () => {
          sent++
          return new Response('')
        },
        policy: { downstream: downstream as DownstreamOptions },
      }),
    ).rejects.toThrow(message)
    expect(sent).toBe(0)
  })
})

describe('giveUpResponse: a relay’s give-up in the client’s protocol, for gateways that translate outside the relay', () => {
  it('a 429 with its wait: Anthropic’s error body, retry-after, and the SDK raises RateLimitError', async () => {
    const response = giveUpResponse(
      {
        kind: 'failed',
        ok: false,
        attempts: [],
        status: 429,
        error: { type: 'rate_limit_error', message: 'every key is rate limited' },
        reason: 'all-keys-rate-limited',
        retryAfterMs: 2_500,
        durationMs: 1,
      },
      anthropicMessages,
    )
    expect(response.status).toBe(429)
    expect(response.headers.get('retry-after')).toBe('3')
    expect(response.headers.get('x-should-retry')).toBeNull()
    const client = new Anthropic({ apiKey: 'x', maxRetries: 0, fetch: async () => response })
    const error = await client.messages.create({ ...ask }).catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(Anthropic.RateLimitError)
    expect((error as Error).message).toContain('every key is rate limited')
  })

  it('a 502: x-should-retry false, no retry-after', async () => {
    const response = giveUpResponse(
      {
        kind: 'failed',
        ok: false,
        attempts: [],
        status: 502,
        error: { type: 'upstream_error', message: 'the upstream stream ended without any output' },
        reason: 'empty',
        retryAfterMs: undefined,
        durationMs: 1,
      },
      anthropicMessages,
    )
    expect(response.status).toBe(502)
    expect(response.headers.get('x-should-retry')).toBe('false')
    expect(await response.json()).toMatchObject({ type: 'error', error: { type: 'api_error' } })
  })
})
