/**
 * Reasoning promoted to text in Anthropic Messages, read by the official SDK: the rendered
 * bytes begin a message (`message_start`) whenever the client was sent none, never a second
 * one, and the SDK's `finalMessage()` holds the reasoning as text with `end_turn`.
 */
import Anthropic from '@anthropic-ai/sdk'
import { describe, expect, it } from 'vitest'
import type { RenderState, StreamTracker } from '../../src/advanced.js'
import {
  anthropicMessages,
  classifyEof,
  createFrameReader,
  createStreamTracker,
  type SseFrame,
} from '../../src/index.js'
import { concatBytes } from '../../src/testing/arbitraries.js'
import { chunkSource, readAll } from '../support/sources.js'
import { fixtureBytes, fixtures } from './fixtures.js'

const encoder = new TextEncoder()
const decoder = new TextDecoder()

// --- frames -------------------------------------------------------------------------------

const sse = (type: string, body: Record<string, unknown> = {}) =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`
const model = 'claude-sonnet-4-5-20250929'
const messageStart = sse('message_start', {
  message: {
    id: 'msg_01upstream',
    type: 'message',
    role: 'assistant',
    content: [],
    model,
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 12, output_tokens: 1 },
  },
})
const thinkingStart = (index: number) =>
  sse('content_block_start', {
    index,
    content_block: { type: 'thinking', thinking: '', signature: '' },
  })
const thinking = (index: number, text: string) =>
  sse('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: text } })
const thinkingStop = (index: number) => sse('content_block_stop', { index })
const text = (index: number, value: string) =>
  sse('content_block_delta', { index, delta: { type: 'text_delta', text: value } })
const ping = sse('ping')

const framesOf = (bytes: Uint8Array): Promise<SseFrame[]> =>
  readAll(createFrameReader(chunkSource([bytes])))

async function tracked(
  wire: string | Uint8Array,
  options?: Parameters<typeof createStreamTracker>[1],
): Promise<{ bytes: Uint8Array; tracker: StreamTracker }> {
  const bytes = typeof wire === 'string' ? encoder.encode(wire) : wire
  const tracker = createStreamTracker(anthropicMessages, options)
  for (const frame of await framesOf(bytes)) tracker.observe(frame)
  return { bytes, tracker }
}

/**
 * What the pump writes at a thinking-only EOF under `promote-reasoning`: the reasoning as text,
 * which the client's tracker then sees, and a stop rendered from the state after it.
 * `reasoning` stands in for the upstream's reasoning when the client was sent none of it.
 */
async function promote(tracker: StreamTracker, reasoning?: string) {
  const state: RenderState =
    reasoning === undefined ? tracker.state : { ...tracker.state, reasoningText: reasoning }
  const asText = anthropicMessages.renderReasoningAsText(state)
  for (const frame of await framesOf(asText)) tracker.observe(frame)
  return { asText, stop: anthropicMessages.renderStop(tracker.state) }
}

// --- the SDK --------------------------------------------------------------------------------

function sdkOver(bytes: Uint8Array): Anthropic {
  return new Anthropic({
    apiKey: 'sk-ant-test',
    baseURL: 'http://127.0.0.1:9',
    maxRetries: 0,
    fetch: async () =>
      new Response(
        new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(bytes)
            controller.close()
          },
        }),
        { status: 200, headers: { 'content-type': 'text/event-stream' } },
      ),
  })
}

const ask = {
  model: 'claude-test',
  max_tokens: 1024,
  messages: [{ role: 'user' as const, content: 'hi' }],
}

/** Every raw event the SDK yields for `bytes`, and what it threw. */
async function sdkEvents(bytes: Uint8Array) {
  const events: Anthropic.RawMessageStreamEvent[] = []
  let error: unknown
  try {
    for await (const event of await sdkOver(bytes).messages.create({ ...ask, stream: true }))
      events.push(event)
  } catch (caught) {
    error = caught
  }
  return { events, error }
}

const eventNames = (bytes: Uint8Array) =>
  [...decoder.decode(bytes).matchAll(/^event: (\w+)$/gm)].map((match) => match[1])

/** The SDK reads the whole stream as one message whose last block is the reasoning as text. */
async function expectPromoted(bytes: Uint8Array, reasoning: string) {
  const { events, error } = await sdkEvents(bytes)
  expect(error).toBeUndefined()
  expect(events.filter((event) => event.type === 'message_start')).toHaveLength(1)
  expect(events.at(-1)?.type).toBe('message_stop')
  const message = await sdkOver(bytes).messages.stream(ask).finalMessage()
  expect(message.role).toBe('assistant')
  expect(message.stop_reason).toBe('end_turn')
  expect(message.content.at(-1)).toMatchObject({ type: 'text', text: reasoning })
  return message
}

// --- cases ----------------------------------------------------------------------------------

const reasoning = 'Let me think. The answer is 42.'

describe('anthropicMessages.renderReasoningAsText when the client was sent no message_start', () => {
  it.each([
    ['nothing at all', ''],
    ['keep-alives only', `${ping}: keep-alive\n\n${ping}`],
  ])(
    'after %s: begins a message, and the SDK reads the reasoning as the answer',
    async (_, wire) => {
      const { bytes, tracker } = await tracked(wire)
      expect(tracker.state.firstData).toBeUndefined()
      const { asText, stop } = await promote(tracker, reasoning)
      expect(eventNames(asText)).toEqual([
        'message_start',
        'content_block_start',
        'content_block_delta',
        'content_block_stop',
      ])
      expect(eventNames(stop)).toEqual(['message_delta', 'message_stop'])
      const message = await expectPromoted(concatBytes([bytes, asText, stop]), reasoning)
      expect(message.content).toEqual([{ type: 'text', text: reasoning }])
      expect(message).toMatchObject({ type: 'message', model: 'unknown' })
      expect(message.id).toMatch(/^msg_/)
    },
  )

  it.each([
    ['thinking deltas only', thinking(0, 'Let me think.') + thinking(0, ' The answer is 42.')],
    [
      'a thinking block, then pings and deltas',
      thinkingStart(0) + ping + thinking(0, 'Let me think.') + thinking(0, ' The answer is 42.'),
    ],
    [
      'a closed thinking block, then an open one',
      thinkingStart(0) +
        thinking(0, 'Let me think.') +
        thinkingStop(0) +
        thinkingStart(1) +
        thinking(1, ' The answer is 42.'),
    ],
  ])(
    'after %s (no message_start): the message starts first, its text block at index 0',
    async (_, wire) => {
      const { bytes, tracker } = await tracked(wire)
      expect(tracker.state.reasoningText).toBe(reasoning)
      expect(classifyEof(tracker.state).kind).toBe('thinking-only')
      const { asText, stop } = await promote(tracker)
      expect(decoder.decode(asText)).toMatch(
        /^event: message_start\ndata: \{"type":"message_start","message":\{"id":"msg_[^"]+","type":"message","role":"assistant","content":\[\],"model":"unknown",/,
      )
      expect(decoder.decode(asText)).toContain('"type":"content_block_start","index":0,')
      expect(eventNames(stop)).not.toContain('message_start')
      const message = await expectPromoted(concatBytes([bytes, asText, stop]), reasoning)
      // The SDK ignored the blocks sent before the message began: only the promoted text is left.
      expect(message.content.map((block) => block.type)).toEqual(['text'])
    },
  )

  it('after thinking deltas only, a stop rendered from the same state (not yet updated) still starts no second message', async () => {
    const { bytes, tracker } = await tracked(thinking(0, reasoning))
    const asText = anthropicMessages.renderReasoningAsText(tracker.state)
    const stop = anthropicMessages.renderStop(tracker.state)
    expect(eventNames(stop)).toEqual(['message_delta', 'message_stop'])
    await expectPromoted(concatBytes([bytes, asText, stop]), reasoning)
  })
})

describe('anthropicMessages.renderReasoningAsText when a message_start was sent', () => {
  it('continues that message: no second message_start, the text block after the last one', async () => {
    const { bytes, tracker } = await tracked(
      messageStart + thinkingStart(0) + ping + thinking(0, reasoning),
    )
    const { asText, stop } = await promote(tracker)
    expect(eventNames(asText)).toEqual([
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
    ])
    expect(decoder.decode(asText)).toContain('"type":"content_block_start","index":1,')
    const message = await expectPromoted(concatBytes([bytes, asText, stop]), reasoning)
    expect(message).toMatchObject({ id: 'msg_01upstream', model })
    expect(message.content.map((block) => block.type)).toEqual(['thinking', 'text'])
  })

  it('continues it too when the tracker kept no first frame (keepFirstDataChars: 0)', async () => {
    const { bytes, tracker } = await tracked(messageStart + thinkingStart(0) + thinking(0, 'x'), {
      keepFirstDataChars: 0,
    })
    expect(tracker.state.firstData).toBeUndefined()
    const { asText, stop } = await promote(tracker)
    expect(eventNames(concatBytes([asText, stop]))).not.toContain('message_start')
    await expectPromoted(concatBytes([bytes, asText, stop]), 'x')
  })

  it('for every cut of every Anthropic fixture that ends thinking-only, with and without its message_start, the SDK reads the reasoning as the answer', async () => {
    let cases = 0
    for (const fixture of fixtures.filter((f) => f.protocol === 'anthropic-messages')) {
      const all = await framesOf(fixtureBytes(fixture.file))
      const headless = all.filter((frame) => frame.event !== 'message_start')
      for (const frames of [all, headless]) {
        for (let cut = 0; cut <= frames.length; cut++) {
          const prefix = concatBytes(frames.slice(0, cut).map((frame) => frame.raw))
          const { tracker } = await tracked(prefix)
          if (classifyEof(tracker.state).kind !== 'thinking-only') continue
          const promoted = tracker.state.reasoningText
          const { asText, stop } = await promote(tracker)
          await expectPromoted(concatBytes([prefix, asText, stop]), promoted)
          cases++
        }
      }
    }
    expect(cases).toBeGreaterThanOrEqual(10)
  })
})

describe('anthropicMessages.renderStop and message_start', () => {
  it('begins a message when nothing was sent at all', async () => {
    const { tracker } = await tracked('')
    const stop = anthropicMessages.renderStop(tracker.state)
    expect(eventNames(stop)).toEqual(['message_start', 'message_delta', 'message_stop'])
    const { error } = await sdkEvents(stop)
    expect(error).toBeUndefined()
  })

  it('after text sent without a message_start, starts none: the SDK fails rather than reading an empty answer as complete', async () => {
    const { bytes, tracker } = await tracked(
      sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
        text(0, 'Hello'),
    )
    expect(classifyEof(tracker.state).kind).toBe('partial')
    const stop = anthropicMessages.renderStop(tracker.state)
    expect(eventNames(stop)).toEqual(['content_block_stop', 'message_delta', 'message_stop'])
    await expect(
      sdkOver(concatBytes([bytes, stop]))
        .messages.stream(ask)
        .finalMessage(),
    ).rejects.toThrow(Anthropic.AnthropicError)
  })
})
