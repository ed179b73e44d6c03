import Anthropic from '@anthropic-ai/sdk'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createFrameReader,
  createStreamTracker,
  openaiChatWith,
  type SseFrame,
  type StreamAdapter,
} from '../../src/index.js'
import { wireFor } from '../../src/testing/wire.js'

/**
 * The adapters' continuation seam on its own: the requests they build, and their splices
 * over a client's stream, read back by the official SDK where it matters.
 */

const encoder = new TextEncoder()
const decoder = new TextDecoder()

async function framesOf(text: string): Promise<SseFrame[]> {
  const reader = createFrameReader(
    new ReadableStream({
      start(controller) {
        controller.enqueue(encoder.encode(text))
        controller.close()
      },
    }),
  )
  const frames: SseFrame[] = []
  for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
    frames.push(frame)
  }
  return frames
}

/** The client's frames, then a continuation's frames through the adapter's splice. */
async function spliced(adapter: StreamAdapter, client: string, continuation: string, text: string) {
  const tracker = createStreamTracker(adapter)
  for (const frame of await framesOf(client)) tracker.observe(frame)
  const splice = adapter.spliceContinuation?.({ text }, tracker.state)
  if (splice === undefined) throw new Error('no splice')
  const out = (await framesOf(continuation)).flatMap((frame) => splice(frame))
  return client + out.map((frame) => decoder.decode(frame.raw)).join('')
}

async function anthropicMessage(body: string) {
  const client = new Anthropic({
    apiKey: 'sk-x',
    maxRetries: 0,
    fetch: async () => new Response(body, { headers: { 'content-type': 'text/event-stream' } }),
  })
  return client.messages
    .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
    .finalMessage()
}

describe('anthropicMessages continuation', () => {
  const request = {
    url: 'https://api.anthropic.com/v1/messages',
    body: { model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] },
  }

  it('builds the prefill: the received text, trailing whitespace trimmed, as the final assistant message', () => {
    expect(anthropicMessages.buildContinuation?.(request, { text: 'The quick \n' })).toEqual({
      url: request.url,
      body: {
        ...request.body,
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'The quick' },
        ],
      },
    })
  })

  it("extends the host's own prefill, and declines with thinking, whitespace only, or a non-text prefill", () => {
    const prefilled = {
      ...request,
      body: {
        ...request.body,
        messages: [
          ...request.body.messages,
          { role: 'assistant', content: [{ type: 'text', text: '{"a":' }] },
        ],
      },
    }
    expect(anthropicMessages.buildContinuation?.(prefilled, { text: ' 1' })?.body.messages).toEqual(
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: '{"a": 1' },
      ],
    )
    const thinking = {
      ...request,
      body: { ...request.body, thinking: { type: 'enabled', budget_tokens: 1024 } },
    }
    expect(anthropicMessages.buildContinuation?.(thinking, { text: 'The' })).toBeNull()
    expect(anthropicMessages.buildContinuation?.(request, { text: ' \n' })).toBeNull()
    const image = {
      ...request,
      body: { ...request.body, messages: [{ role: 'assistant', content: [{ type: 'image' }] }] },
    }
    expect(anthropicMessages.buildContinuation?.(image, { text: 'x' })).toBeNull()
  })

  it('a continuation that begins with a tool call closes the open text block and follows its index', async () => {
    const wire = wireFor(anthropicMessages)
    const client = [...wire.start(), ...wire.text('Let me check. ')].join('')
    const next = wireFor(anthropicMessages)
    const continuation = [
      ...next.start(),
      ...next.tool('lookup', ['{"q":"fox"}']),
      ...next.finish('tool_use'),
    ].join('')
    const message = await anthropicMessage(
      await spliced(anthropicMessages, client, continuation, 'Let me check. '),
    )
    expect(message.content).toEqual([
      { type: 'text', text: 'Let me check. ' },
      { type: 'tool_use', id: 'toolu_0', name: 'lookup', input: { q: 'fox' } },
    ])
    expect(message.stop_reason).toBe('tool_use')
  })

  it('a cut after the text block closed: the continuation is a new block after it', async () => {
    const wire = wireFor(anthropicMessages)
    const client =
      [...wire.start(), ...wire.text('One.')].join('') +
      'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    const next = wireFor(anthropicMessages)
    const continuation = [...next.start(), ...next.text(' Two.'), ...next.finish('stop')].join('')
    const message = await anthropicMessage(
      await spliced(anthropicMessages, client, continuation, 'One.'),
    )
    expect(message.content.map((block) => (block.type === 'text' ? block.text : ''))).toEqual([
      'One.',
      ' Two.',
    ])
  })

  it('the regenerated whitespace is skipped only while it repeats what the client got', async () => {
    const wire = wireFor(anthropicMessages)
    const client = [...wire.start(), ...wire.text('Hello \n')].join('')
    for (const [model, expected] of [
      [' \nworld', 'Hello \nworld'],
      [' world', 'Hello \nworld'],
      ['world', 'Hello \nworld'],
    ] as const) {
      const next = wireFor(anthropicMessages)
      const continuation = [
        ...next.start(),
        ...[...model].flatMap((c) => next.text(c)),
        ...next.finish('stop'),
      ].join('')
      const message = await anthropicMessage(
        await spliced(anthropicMessages, client, continuation, 'Hello \n'),
      )
      const text = message.content
        .map((block) => (block.type === 'text' ? block.text : ''))
        .join('')
      // What the model wrote after "Hello" is kept from its first character that differs
      // from what the client already got (the client cannot be sent less than it has).
      expect(text, JSON.stringify(model)).toBe(expected)
    }
  })
})

describe('openaiChatWith continuation', () => {
  const request = {
    url: 'https://api.test/v1/chat/completions',
    body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
  }

  it('each dialect builds its own request; none continues several choices', () => {
    const text = { text: 'The quick ' }
    const last = (dialect: 'deepseek-prefix' | 'mistral-prefix' | 'vllm-continue') =>
      openaiChatWith({ continuation: dialect }).buildContinuation?.(request, text)
    expect(last('deepseek-prefix')?.body.messages).toEqual([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'The quick ', prefix: true },
    ])
    expect(last('mistral-prefix')?.body.messages).toEqual(last('deepseek-prefix')?.body.messages)
    expect(last('vllm-continue')?.body).toMatchObject({
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'The quick ' },
      ],
      continue_final_message: true,
      add_generation_prompt: false,
    })
    const several = { ...request, body: { ...request.body, n: 2 } }
    expect(
      openaiChatWith({ continuation: 'vllm-continue' }).buildContinuation?.(several, text),
    ).toBeNull()
  })

  it("the splice drops the role chunk and gives every chunk the client's id", async () => {
    const adapter = openaiChatWith({ continuation: 'deepseek-prefix' })
    const client =
      'data: {"id":"chatcmpl-client","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"The "},"finish_reason":null}]}\n\n'
    const continuation = [
      'data: {"id":"chatcmpl-other","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
      'data: {"id":"chatcmpl-other","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":0,"delta":{"content":"end."},"finish_reason":null}]}\n\n',
      'data: {"id":"chatcmpl-other","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
      'data: [DONE]\n\n',
    ].join('')
    const whole = await spliced(adapter, client, continuation, 'The ')
    const chunks = whole.split('\n\n').filter((part) => part !== '')
    expect(chunks).toHaveLength(4)
    expect(whole).not.toContain('chatcmpl-other')
    expect(whole).not.toMatch(/"created":2/)
    expect(chunks.at(-1)).toBe('data: [DONE]')
  })
})
