import Anthropic from '@anthropic-ai/sdk'
import { afterEach, describe, expect, it } from 'vitest'
import { openaiChunkToAnthropic } from '../../examples/anthropic-over-openai-gateway.js'
import {
  createFrameReader,
  type DownstreamTransformContext,
  openaiChat,
  type RelayPolicy,
  relay,
  webSink,
} from '../../src/index.js'
import { serveFetch } from '../../src/node.js'
import { type ChatScript, chunk, done, startChatUpstream } from '../support/chat-upstream.js'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

/**
 * The relay's own stream (OpenAI Chat), rewritten afterwards by the gateway's translator, as a
 * gateway that keeps its translation layer would: whole frames from `createFrameReader`,
 * comments skipped (they have no `data`), every other frame, the relay's honest error
 * included, translated.
 */
function translateAfter(
  body: ReadableStream<Uint8Array>,
  seen: string[],
  skipped: string[],
): ReadableStream<string> {
  const reader = createFrameReader(body)
  const context: DownstreamTransformContext = { upstream: openaiChat, state: {} }
  return new ReadableStream<string>({
    async pull(controller) {
      for (;;) {
        const frame = await reader.next()
        if (frame === null) return controller.close()
        if (frame.data === undefined) {
          skipped.push(new TextDecoder().decode(frame.raw))
          continue
        }
        seen.push(frame.data)
        const out = openaiChunkToAnthropic(frame, context)
        if (out !== null) return controller.enqueue(out)
      }
    },
    cancel: (reason) => reader.cancel(reason),
  })
}

async function setup(script: ChatScript, policy: RelayPolicy = {}) {
  const upstream = await startChatUpstream([script])
  cleanups.push(upstream.close)
  const seen: string[] = []
  const skipped: string[] = []
  const gateway = await serveFetch(async (request) => {
    const { sink, response } = webSink()
    void relay({
      sink,
      adapter: openaiChat,
      signal: request.signal,
      attempt: ({ signal }) =>
        fetch(`${upstream.url}/v1/chat/completions`, { method: 'POST', signal }),
      policy: { maxAttempts: 1, ...policy },
    })
    const relayed = await response
    if (relayed.body === null || !relayed.ok) return relayed
    return new Response(
      translateAfter(relayed.body, seen, skipped).pipeThrough(new TextEncoderStream()),
      {
        headers: { 'content-type': 'text/event-stream' },
      },
    )
  })
  cleanups.push(gateway.close)
  const client = new Anthropic({ baseURL: gateway.url, apiKey: 'client-key', maxRetries: 0 })
  return { client, seen, skipped }
}

const ask = {
  model: 'claude-test',
  max_tokens: 64,
  messages: [{ role: 'user' as const, content: 'Hi' }],
}

describe('a gateway that translates after the relay (the documented alternative)', () => {
  it('an honest ending (a cut after output) still reaches the Anthropic client as an error', async () => {
    const { client, seen } = await setup({
      frames: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Hel' })],
      end: 'destroy',
    })
    await expect(client.messages.stream(ask).finalMessage()).rejects.toThrow(/incomplete/)
    // The relay's error frame is OpenAI-shaped: the translator is what makes it Anthropic's.
    expect(JSON.parse(seen.at(-1) ?? '')).toHaveProperty('error')
  })

  it('keep-alive comments before content are skipped and the answer is whole', async () => {
    const { client, skipped } = await setup(
      {
        frames: [chunk({ role: 'assistant', content: 'Hello' }), chunk({}, 'stop'), done],
        gapMs: 100,
      },
      { earlyHeaders: true, keepAliveIntervalMs: 20 },
    )
    const message = await client.messages.stream(ask).finalMessage()
    expect(message.content).toEqual([{ type: 'text', text: 'Hello' }])
    // The relay wrote keep-alives while it held the stream before content; none after it.
    expect(skipped.length).toBeGreaterThan(0)
    expect(new Set(skipped)).toEqual(new Set([': keep-alive\n\n']))
  })
})
