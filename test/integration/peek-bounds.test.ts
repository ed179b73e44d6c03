import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import { describe, expect, it } from 'vitest'
import { createMemoryKeyPool, createResilientFetch } from '../../src/index.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * Peek bounds never cause a billed retry loop: a stream that is making progress when a bound
 * is reached is committed, and keep-alive comments never count toward the frame bound.
 */

const { listen } = useLoopback()

const event = (name: string, data: object) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`

/** An Anthropic stream: `before` (thinking deltas or comments), then the answer. */
function anthropicStream(before: string, index = 1): string {
  return [
    event('message_start', {
      type: 'message_start',
      message: {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: 'claude-test',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 3, output_tokens: 0 },
      },
    }),
    before,
    event('content_block_start', {
      type: 'content_block_start',
      index,
      content_block: { type: 'text', text: '' },
    }),
    event('content_block_delta', {
      type: 'content_block_delta',
      index,
      delta: { type: 'text_delta', text: 'The answer.' },
    }),
    event('content_block_stop', { type: 'content_block_stop', index }),
    event('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { output_tokens: 9 },
    }),
    event('message_stop', { type: 'message_stop' }),
  ].join('')
}

const thinking = (deltas: number) =>
  event('content_block_start', {
    type: 'content_block_start',
    index: 0,
    content_block: { type: 'thinking', thinking: '', signature: '' },
  }) +
  Array.from({ length: deltas }, (_, i) =>
    event('content_block_delta', {
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'thinking_delta', thinking: `step ${i}: ${'x'.repeat(120)} ` },
    }),
  ).join('') +
  event('content_block_stop', { type: 'content_block_stop', index: 0 })

async function upstream(body: string) {
  let requests = 0
  const server = createServer((req, res) => {
    withBody(req, () => {
      requests++
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(body)
    })
  })
  return { url: await listen(server), requests: () => requests }
}

async function ask(url: string, commitOn: 'content' | 'visible') {
  const fetch = createResilientFetch({
    pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-ant-a-0123456789' }]),
    policy: { peek: { commitOn } },
  })
  const client = new Anthropic({ apiKey: 'x', baseURL: url, fetch, maxRetries: 0 })
  return client.messages
    .stream({ model: 'claude-test', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
    .finalMessage()
}

describe('peek bounds never cause a billed retry loop', () => {
  it("6,000 thinking deltas (~1 MB) before the answer under commitOn: 'content': one upstream request, the whole answer", async () => {
    const up = await upstream(anthropicStream(thinking(6_000)))
    const message = await ask(up.url, 'content')
    expect(message.content.map((block) => block.type)).toEqual(['thinking', 'text'])
    expect(message.content.at(-1)).toMatchObject({ type: 'text', text: 'The answer.' })
    expect(up.requests()).toBe(1)
  })

  it('10,000 keep-alive comments before the answer: one upstream request, the whole answer', async () => {
    const up = await upstream(anthropicStream(': keep-alive\n\n'.repeat(10_000), 0))
    const message = await ask(up.url, 'content')
    expect(message.content).toMatchObject([{ type: 'text', text: 'The answer.' }])
    expect(up.requests()).toBe(1)
  })
})
