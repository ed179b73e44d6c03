import { Stream as AnthropicStream } from '@anthropic-ai/sdk/streaming'
import { Stream as OpenAIStream } from 'openai/streaming'
import { Stream as OpenAINextStream } from 'openai-next/streaming'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  openaiChat,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { scriptedUpstream } from '../support/upstream.js'

/**
 * An error after the finish chunk (OpenRouter, length-limited: the finish chunk, then a chunk
 * holding `error` "Token limit reached"). What the client's SDK reads is what the client got:
 * the `openai` SDK raises on the error frame, so the outcome is the upstream's error, never
 * `completed` and `ok`. The same for an Anthropic `event: error` after `message_delta`.
 */

const chat = (body: Record<string, unknown>) =>
  `data: ${JSON.stringify({ id: 'gen-1', object: 'chat.completion.chunk', ...body })}\n\n`

const openRouterLength =
  chat({ choices: [{ index: 0, delta: { role: 'assistant', content: 'Once upon' } }] }) +
  chat({ choices: [{ index: 0, delta: { content: '' }, finish_reason: 'length' }] }) +
  chat({
    error: { code: 400, message: 'Token limit reached' },
    choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
  })

const anthropicAfterStop = [
  ['message_start', { message: { id: 'msg_1', role: 'assistant', content: [], usage: {} } }],
  ['content_block_start', { index: 0, content_block: { type: 'text', text: '' } }],
  ['content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hi' } }],
  ['content_block_stop', { index: 0 }],
  ['message_delta', { delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 1 } }],
  ['error', { error: { type: 'overloaded_error', message: 'Overloaded' } }],
]
  .map(
    ([name, body]) =>
      `event: ${name}\ndata: ${JSON.stringify({ type: name, ...(body as object) })}\n\n`,
  )
  .join('')

async function sdkRaises(
  stream: { fromSSEResponse(r: Response, c: AbortController): AsyncIterable<unknown> },
  text: string,
) {
  try {
    const response = new Response(text, { headers: { 'content-type': 'text/event-stream' } })
    for await (const _ of stream.fromSSEResponse(response, new AbortController())) {
      // Reading is all.
    }
    return false
  } catch {
    return true
  }
}

async function relayed(adapter: StreamAdapter, body: string) {
  const upstream = scriptedUpstream([{ steps: [{ bytes: body }] }])
  const sink = createRecordingSink()
  const outcome = await relay({
    sink,
    pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-a-0123456789abcdef' }]),
    adapter,
    attempt: upstream.attempt,
    policy: { maxAttempts: 1 },
  })
  return { outcome, text: sink.text }
}

describe('an error after the finish is what the client got', () => {
  it('Chat (OpenRouter, length): the openai SDK raises reading the relayed bytes, and the outcome is the upstream error, not completed', async () => {
    const { outcome, text } = await relayed(openaiChat, openRouterLength)
    expect(text).toBe(openRouterLength)
    expect(await sdkRaises(OpenAIStream as never, text)).toBe(true)
    expect(await sdkRaises(OpenAINextStream as never, text)).toBe(true)
    expect(outcome).toMatchObject({ kind: 'committed', ok: false, end: { kind: 'upstream-error' } })
  })

  it('Anthropic: an `event: error` after message_delta; the SDK raises, the outcome is the upstream error', async () => {
    const { outcome, text } = await relayed(anthropicMessages, anthropicAfterStop)
    expect(await sdkRaises(AnthropicStream as never, text)).toBe(true)
    expect(outcome).toMatchObject({ kind: 'committed', ok: false, end: { kind: 'upstream-error' } })
  })

  it('without the error frame the same streams are completed and ok', async () => {
    const clean = openRouterLength.slice(0, openRouterLength.lastIndexOf('data: '))
    const { outcome } = await relayed(openaiChat, `${clean}data: [DONE]\n\n`)
    expect(outcome).toMatchObject({ kind: 'committed', ok: true, end: { kind: 'completed' } })
  })
})
