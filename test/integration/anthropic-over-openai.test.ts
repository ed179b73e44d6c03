import Anthropic from '@anthropic-ai/sdk'
import { afterEach, describe, expect, it } from 'vitest'
import {
  openaiChunkToAnthropic,
  startTranslatingGateway,
  type TranslatingGatewayConfig,
} from '../../examples/anthropic-over-openai-gateway.js'
import type { RelayOutcome, RelayPolicy, SseFrame } from '../../src/index.js'
import { type ChatScript, chunk, done, startChatUpstream } from '../support/chat-upstream.js'

const fast: RelayPolicy = {
  maxAttempts: 3,
  backoff: { baseMs: 5, maxMs: 20 },
  peek: { firstByteTimeoutMs: 2_000, firstOutputTimeoutMs: 2_000 },
}

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

async function setup(
  scripts: readonly ChatScript[],
  extra: Partial<TranslatingGatewayConfig> = {},
) {
  const upstream = await startChatUpstream(scripts)
  cleanups.push(upstream.close)
  const outcomes: RelayOutcome[] = []
  const gateway = await startTranslatingGateway({
    upstreamUrl: `${upstream.url}/v1`,
    upstreamApiKey: 'sk-upstream-secret',
    model: 'gpt-test',
    policy: fast,
    onOutcome: (outcome) => outcomes.push(outcome),
    ...extra,
    ...(extra.policy === undefined ? {} : { policy: { ...fast, ...extra.policy } }),
  })
  cleanups.push(gateway.close)
  const client = new Anthropic({ baseURL: gateway.url, apiKey: 'client-key', maxRetries: 0 })
  return { upstream, gateway, client, outcomes }
}

const ask = {
  model: 'claude-test',
  max_tokens: 64,
  messages: [{ role: 'user' as const, content: 'Hi' }],
}

const textAnswer = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Hello' }),
  chunk({ content: ', world' }),
  chunk({}, 'stop'),
  done,
]

/** The raw SSE frames a client got: event names and parsed data. */
async function rawFrames(url: string): Promise<{ event: string | null; data: string | null }[]> {
  const response = await fetch(`${url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...ask, stream: true }),
  })
  const text = await response.text()
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      const lines = block.split('\n')
      const event = lines.find((line) => line.startsWith('event: '))?.slice(7) ?? null
      const data = lines.find((line) => line.startsWith('data: '))?.slice(6) ?? null
      return { event: event ?? (block.startsWith(':') ? ':comment' : null), data }
    })
}

/** Every data line is an Anthropic event: a `type`, never OpenAI's `choices`, `object` or `[DONE]`. */
function expectAnthropicOnly(frames: { event: string | null; data: string | null }[]): void {
  for (const frame of frames) {
    if (frame.event === ':comment') continue
    expect(frame.data).not.toBe('[DONE]')
    const data = JSON.parse(frame.data ?? 'null') as Record<string, unknown>
    expect(data).not.toHaveProperty('choices')
    expect(data).not.toHaveProperty('object')
    expect(data.type).toBe(frame.event)
  }
}

describe('Anthropic Messages clients over an OpenAI Chat upstream (downstream adapter + transform)', () => {
  it('pre-output faults are retried and the SDK gets the whole answer', async () => {
    const { client, upstream, outcomes } = await setup([
      { frames: [chunk({ role: 'assistant', content: '' })], end: 'eof' },
      { status: 503, json: { error: { message: 'overloaded', type: 'server_error' } } },
      { frames: textAnswer },
    ])
    const message = await client.messages.stream(ask).finalMessage()
    expect(message.content).toEqual([{ type: 'text', text: 'Hello, world' }])
    expect(message.stop_reason).toBe('end_turn')
    expect(message.model).toBe('gpt-test')
    expect(upstream.requests).toBe(3)
    expect(outcomes[0]).toMatchObject({ kind: 'committed', end: { kind: 'completed' } })
  })

  it('tool use arrives as a tool_use block with its input assembled from input_json_delta', async () => {
    const call = (args: string, extra: Record<string, unknown> = {}) =>
      chunk({
        tool_calls: [
          { index: 0, ...extra, function: { arguments: args, ...(extra.function as object) } },
        ],
      })
    const { client } = await setup([
      {
        frames: [
          chunk({ role: 'assistant', content: null }),
          chunk({
            tool_calls: [
              {
                index: 0,
                id: 'call_1',
                type: 'function',
                function: { name: 'weather', arguments: '' },
              },
            ],
          }),
          call('{"city":'),
          call('"Paris"}'),
          chunk({}, 'tool_calls'),
          done,
        ],
      },
    ])
    const message = await client.messages.stream(ask).finalMessage()
    expect(message.stop_reason).toBe('tool_use')
    expect(message.content).toEqual([
      { type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris' } },
    ])
  })

  it('a cut after output raises the SDK error from an Anthropic-shaped honest error', async () => {
    const cut: ChatScript = {
      frames: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Hel' })],
      end: 'destroy',
    }
    const { client, gateway, outcomes } = await setup([cut])
    const stream = client.messages.stream(ask)
    await expect(stream.finalMessage()).rejects.toThrow(/mid-stream; the answer is incomplete/)
    expect(outcomes[0]).toMatchObject({
      kind: 'committed',
      end: { kind: 'error-written', cause: 'read-error' },
    })
    const frames = await rawFrames(gateway.url)
    expectAnthropicOnly(frames)
    const last = frames.at(-1)
    expect(last?.event).toBe('error')
    expect(JSON.parse(last?.data ?? '')).toMatchObject({
      type: 'error',
      error: { type: 'api_error', message: expect.stringMatching(/incomplete/) },
    })
  })

  it('a clean EOF inside a frame after output: the Anthropic error event, the cut frame never written, the outcome a cut', async () => {
    const cutFrame = chunk({ content: ', world' }).slice(0, 60)
    const { client, gateway, outcomes } = await setup([
      {
        frames: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Hel' }), cutFrame],
        end: 'eof',
      },
    ])
    await expect(client.messages.stream(ask).finalMessage()).rejects.toThrow(
      /ended in the middle of an event/,
    )
    expect(outcomes[0]).toMatchObject({
      kind: 'committed',
      end: { kind: 'error-written', cause: 'eof-mid-frame' },
    })
    const frames = await rawFrames(gateway.url)
    expectAnthropicOnly(frames)
    expect(frames.at(-1)?.event).toBe('error')
    expect(frames.map((frame) => frame.event)).not.toContain('message_stop')
  })

  it('an EOF without a finish reason ends in the Anthropic error event, after a closed block', async () => {
    const { gateway } = await setup([
      {
        frames: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Hel' })],
        end: 'eof',
      },
    ])
    const frames = await rawFrames(gateway.url)
    expectAnthropicOnly(frames)
    expect(frames.map((frame) => frame.event)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'error',
    ])
  })

  it('a synthesized stop continues the client stream: it closes the open block, one message_start', async () => {
    const partial: ChatScript = {
      frames: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Hel' })],
      end: 'eof',
    }
    const { client, gateway } = await setup([partial], {
      policy: { onPartialEof: 'synthesize-stop' },
    })
    const message = await client.messages.stream(ask).finalMessage()
    expect(message.content).toEqual([{ type: 'text', text: 'Hel' }])
    expect(message.stop_reason).toBe('end_turn')
    const frames = await rawFrames(gateway.url)
    expectAnthropicOnly(frames)
    expect(frames.map((frame) => frame.event)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ])
    expect(JSON.parse(frames[3]?.data ?? '')).toEqual({ type: 'content_block_stop', index: 0 })
  })

  it('thinking-only is promoted to the answer text in Anthropic blocks when the policy says so', async () => {
    const thought = 'Let me think step by step.'
    const { client } = await setup(
      [
        {
          frames: [
            chunk({ role: 'assistant', content: '' }),
            chunk({ reasoning_content: thought }),
          ],
          end: 'eof',
        },
      ],
      { policy: { onThinkingOnly: 'promote-reasoning' } },
    )
    const message = await client.messages.stream(ask).finalMessage()
    expect(message.stop_reason).toBe('end_turn')
    expect(message.content.map((block) => block.type)).toEqual(['thinking', 'text'])
    expect(message.content[1]).toMatchObject({ type: 'text', text: thought })
  })

  it('keep-alives: upstream comments never reach the transform; the relay writes its own only before content', async () => {
    const seen: string[] = []
    const spy: typeof openaiChunkToAnthropic = (frame: SseFrame, context) => {
      seen.push(new TextDecoder().decode(frame.raw))
      return openaiChunkToAnthropic(frame, context)
    }
    const { gateway } = await setup(
      [
        {
          frames: [
            ': OPENROUTER PROCESSING\n\n',
            ': keep-alive\n\n',
            chunk({ role: 'assistant', content: 'Hel' }),
            ': keep-alive\n\n',
            chunk({ content: 'lo' }),
            chunk({}, 'stop'),
            done,
          ],
          gapMs: 120,
        },
      ],
      { transform: spy, policy: { earlyHeaders: true, keepAliveIntervalMs: 20 } },
    )
    const frames = await rawFrames(gateway.url)
    expect(seen.length).toBeGreaterThan(0)
    for (const raw of seen) expect(raw.startsWith(':')).toBe(false)
    const firstContent = frames.findIndex((frame) => frame.event === 'message_start')
    // Before content the client hears the relay's keep-alives; after it, none.
    expect(frames.slice(0, firstContent).some((frame) => frame.event === ':comment')).toBe(true)
    expect(frames.slice(firstContent).filter((frame) => frame.event === ':comment')).toEqual([])
    expectAnthropicOnly(frames)
    expect(frames.at(-1)?.event).toBe('message_stop')
  })

  it('with early headers, a give-up before content is an in-band Anthropic error event', async () => {
    const { gateway, upstream } = await setup(
      [{ frames: [chunk({ role: 'assistant', content: '' })], end: 'eof' }],
      { policy: { earlyHeaders: true, maxAttempts: 2, downstream: { keepAlive: false } } },
    )
    const frames = await rawFrames(gateway.url)
    expect(upstream.requests).toBe(2)
    expect(frames.map((frame) => frame.event)).toEqual(['error'])
    expect(JSON.parse(frames[0]?.data ?? '')).toMatchObject({ type: 'error', error: {} })
  })

  it('an upstream 500 after every attempt: the client gets 500 (not 502), the request id, an Anthropic body', async () => {
    const { gateway, upstream } = await setup([
      { status: 500, json: { error: { message: 'the model crashed', type: 'server_error' } } },
    ])
    const response = await fetch(`${gateway.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...ask, stream: true }),
    })
    expect(response.status).toBe(500)
    expect(response.headers.get('x-request-id')).toBe('req_upstream_1')
    expect(await response.json()).toMatchObject({
      type: 'error',
      error: { message: expect.stringMatching(/the model crashed/) },
    })
    expect(upstream.requests).toBe(3)
  })

  it('an upstream 400 before content reaches the client in Anthropic shape, with its status', async () => {
    const { client, upstream } = await setup([
      { status: 400, json: { error: { message: 'bad model', type: 'invalid_request_error' } } },
    ])
    const error = await client.messages
      .stream(ask)
      .finalMessage()
      .catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(Anthropic.BadRequestError)
    expect((error as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({
      type: 'error',
      error: { message: expect.stringMatching(/bad model/) },
    })
    expect(upstream.requests).toBe(1)
  })
})
