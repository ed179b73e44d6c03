/**
 * The frames our adapters render, read by the official SDKs: a real client whose `fetch`
 * answers `200 text/event-stream` with a fixture prefix followed by what an adapter rendered.
 */
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import type { RenderableError, StreamTracker } from '../../src/advanced.js'
import {
  anthropicMessages,
  createFrameReader,
  createStreamTracker,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import { concatBytes } from '../../src/testing/arbitraries.js'
import { chunkSource, readAll } from '../support/sources.js'
import { fixtureBytes } from './fixtures.js'

// --- SDK with a canned body -------------------------------------------------------------

const secret = 'sk-abcdefghijklmnop1234'
const leakyMessage = `upstream went away: <html><title>502 Bad Gateway</title></html> key ${secret}`

/** A fetch that answers every request with the same SSE body, one chunk per part. */
function cannedFetch(parts: readonly Uint8Array[]) {
  return async (): Promise<Response> => {
    const queue = [...parts]
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const part = queue.shift()
        if (part === undefined) controller.close()
        else controller.enqueue(part)
      },
    })
    return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } })
  }
}

function openaiWith(parts: readonly Uint8Array[]): OpenAI {
  return new OpenAI({
    apiKey: 'sk-test',
    baseURL: 'http://127.0.0.1:9/v1',
    fetch: cannedFetch(parts),
    maxRetries: 0,
  })
}

function anthropicWith(parts: readonly Uint8Array[]): Anthropic {
  return new Anthropic({
    apiKey: 'sk-ant-test',
    baseURL: 'http://127.0.0.1:9',
    fetch: cannedFetch(parts),
    maxRetries: 0,
  })
}

const chatRequest = { model: 'gpt-4o', messages: [{ role: 'user' as const, content: 'hi' }] }
const responsesRequest = { model: 'gpt-4.1', input: 'hi' }
const messagesRequest = {
  model: 'claude-test',
  max_tokens: 1024,
  messages: [{ role: 'user' as const, content: 'hi' }],
}

/** The first `frames` frames of a fixture (all of them when omitted), observed by a tracker. */
async function fixturePrefix(
  adapter: StreamAdapter,
  file: string,
  frames?: number,
): Promise<{ bytes: Uint8Array; tracker: StreamTracker }> {
  const all = await readAll(createFrameReader(chunkSource([fixtureBytes(file)])))
  const taken = frames === undefined ? all : all.slice(0, frames)
  expect(taken.length).toBe(frames ?? all.length)
  const tracker = createStreamTracker(adapter, { keepTextChars: 65_536 })
  for (const frame of taken) tracker.observe(frame)
  return { bytes: concatBytes(taken.map((frame) => frame.raw)), tracker }
}

/** Feeds rendered bytes through the tracker, as a relay writing them would. */
async function observeRendered(tracker: StreamTracker, bytes: Uint8Array): Promise<void> {
  for (const frame of await readAll(createFrameReader(chunkSource([bytes])))) tracker.observe(frame)
}

/** Iterates `stream`, handing each item to `onItem`; resolves to what it threw, or `undefined`. */
async function drain<T>(stream: AsyncIterable<T>, onItem: (item: T) => void): Promise<unknown> {
  try {
    for await (const item of stream) onItem(item)
  } catch (error) {
    return error
  }
  return undefined
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (error) {
    return error
  }
  throw new Error('expected a rejection')
}

/** The thrown message says what happened and leaks neither the page nor the key. */
function expectHonestMessage(error: unknown): void {
  const message = (error as Error).message
  expect(message).toContain('upstream went away: 502 Bad Gateway')
  expect(message).not.toContain(secret)
  expect(message).not.toContain('<html>')
}

/** What the openai SDK throws for an in-stream error frame: an `APIError` with the type. */
function expectOpenAIError(error: unknown, type: string): void {
  expect(error).toBeInstanceOf(OpenAI.APIError)
  if (!(error instanceof OpenAI.APIError)) return
  expect(error.type).toBe(type)
  expectHonestMessage(error)
}

// --- cases --------------------------------------------------------------------------------

interface Cases {
  /** A prefix with text and no terminal, and the text it shows. */
  output: { file: string; frames: number; text: string }
  /** A prefix with no output at all. */
  preamble: { file: string; frames?: number }
  /** A prefix with reasoning only, and that reasoning. */
  thinking: { file: string; frames?: number; reasoning: string }
  error: RenderableError
}

const chat: Cases = {
  output: { file: 'openai-chat/text.sse', frames: 4, text: 'The capital of France is' },
  preamble: { file: 'openai-chat/role-only-eof.sse' },
  thinking: {
    file: 'openai-chat/reasoning-only-eof.sse',
    reasoning: 'Okay, the user asks about prime numbers.',
  },
  error: { type: 'server_error', message: leakyMessage },
}

const responses: Cases = {
  output: { file: 'openai-responses/text.sse', frames: 7, text: 'Greetings, traveller' },
  preamble: { file: 'openai-responses/created-eof.sse' },
  thinking: {
    // Cut inside the reasoning item: created, in_progress, item added, part added, 4 deltas.
    file: 'openai-responses/reasoning-summary-then-text.sse',
    frames: 8,
    reasoning:
      '**Comparing decimals**\n\nI need to compare 9.11 and 9.8 by their fractional parts.',
  },
  error: { type: 'server_error', message: leakyMessage },
}

const messages: Cases = {
  output: { file: 'anthropic-messages/text.sse', frames: 5, text: 'Hello! How can I' },
  preamble: { file: 'anthropic-messages/start-ping-eof.sse' },
  thinking: {
    file: 'anthropic-messages/thinking-only-eof.sse',
    reasoning: 'Let me think about the proof step by step.',
  },
  error: { type: 'overloaded_error', message: leakyMessage },
}

/** Prefix + rendered error. */
async function errorAfter(
  adapter: StreamAdapter,
  file: string,
  frames: number | undefined,
  error: RenderableError,
) {
  const { bytes, tracker } = await fixturePrefix(adapter, file, frames)
  return { parts: [bytes, adapter.renderError(error, tracker.state)], tracker }
}

/** Prefix + rendered stop. */
async function stopAfter(adapter: StreamAdapter, file: string, frames: number) {
  const { bytes, tracker } = await fixturePrefix(adapter, file, frames)
  return { parts: [bytes, adapter.renderStop(tracker.state)], tracker }
}

/** Prefix + reasoning rendered as text + a stop rendered from the state after it. */
async function promoted(adapter: StreamAdapter, thinking: Cases['thinking']) {
  const { bytes, tracker } = await fixturePrefix(adapter, thinking.file, thinking.frames)
  expect(tracker.state.reasoningText).toBe(thinking.reasoning)
  expect(tracker.state.counts.text).toBe(0)
  const asText = adapter.renderReasoningAsText(tracker.state)
  await observeRendered(tracker, asText)
  return { parts: [bytes, asText, adapter.renderStop(tracker.state)], tracker }
}

// --- OpenAI Chat Completions --------------------------------------------------------------

describe('openaiChat frames, read by the openai SDK', () => {
  const contentOf = (chunk: OpenAI.ChatCompletionChunk) => chunk.choices[0]?.delta.content ?? ''

  it('renderError after output: text deltas first, then an APIError with a sanitised message', async () => {
    const { parts, tracker } = await errorAfter(
      openaiChat,
      chat.output.file,
      chat.output.frames,
      chat.error,
    )
    expect(tracker.state.visibleText).toBe(chat.output.text)
    let text = ''
    const stream = await openaiWith(parts).chat.completions.create({ ...chatRequest, stream: true })
    const error = await drain(stream, (chunk) => {
      text += contentOf(chunk)
    })
    expect(text).toBe(chat.output.text)
    expectOpenAIError(error, chat.error.type)
  })

  it('renderError after output: the stream() helper rejects finalChatCompletion() with the APIError', async () => {
    const { parts } = await errorAfter(openaiChat, chat.output.file, chat.output.frames, chat.error)
    let text = ''
    const runner = openaiWith(parts)
      .chat.completions.stream(chatRequest)
      .on('content', (delta) => {
        text += delta
      })
    const error = await rejection(runner.finalChatCompletion())
    expect(text).toBe(chat.output.text)
    expectOpenAIError(error, chat.error.type)
  })

  it('renderError after a role-only preamble: the SDK throws the APIError', async () => {
    const { parts } = await errorAfter(
      openaiChat,
      chat.preamble.file,
      chat.preamble.frames,
      chat.error,
    )
    const chunks: OpenAI.ChatCompletionChunk[] = []
    const stream = await openaiWith(parts).chat.completions.create({ ...chatRequest, stream: true })
    const error = await drain(stream, (chunk) => chunks.push(chunk))
    expect(chunks.map(contentOf).join('')).toBe('')
    expectOpenAIError(error, chat.error.type)
  })

  it('renderStop after output: the SDK ends normally, the last chunk says finish_reason "stop"', async () => {
    const { parts } = await stopAfter(openaiChat, chat.output.file, chat.output.frames)
    const chunks: OpenAI.ChatCompletionChunk[] = []
    const stream = await openaiWith(parts).chat.completions.create({ ...chatRequest, stream: true })
    const error = await drain(stream, (chunk) => chunks.push(chunk))
    expect(error).toBeUndefined()
    expect(chunks.map(contentOf).join('')).toBe(chat.output.text)
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop')
    expect(chunks.at(-1)?.id).toBe(chunks[0]?.id)
  })

  it('renderStop after output: finalChatCompletion() has finish_reason "stop" and the text', async () => {
    const { parts } = await stopAfter(openaiChat, chat.output.file, chat.output.frames)
    const completion = await openaiWith(parts)
      .chat.completions.stream(chatRequest)
      .finalChatCompletion()
    expect(completion.choices).toHaveLength(1)
    expect(completion.choices[0]?.finish_reason).toBe('stop')
    expect(completion.choices[0]?.message.content).toBe(chat.output.text)
    expect(completion.choices[0]?.message.role).toBe('assistant')
  })

  it('reasoning promoted to text, then renderStop: the visible content is the reasoning', async () => {
    const { parts, tracker } = await promoted(openaiChat, chat.thinking)
    expect(tracker.state.visibleText).toBe(chat.thinking.reasoning)
    const chunks: OpenAI.ChatCompletionChunk[] = []
    const stream = await openaiWith(parts).chat.completions.create({ ...chatRequest, stream: true })
    const error = await drain(stream, (chunk) => chunks.push(chunk))
    expect(error).toBeUndefined()
    expect(chunks.map(contentOf).join('')).toBe(chat.thinking.reasoning)
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop')
  })

  it('reasoning promoted to text, then renderStop: finalChatCompletion() holds it as content', async () => {
    const { parts } = await promoted(openaiChat, chat.thinking)
    const completion = await openaiWith(parts)
      .chat.completions.stream(chatRequest)
      .finalChatCompletion()
    expect(completion.choices[0]?.finish_reason).toBe('stop')
    expect(completion.choices[0]?.message.content).toBe(chat.thinking.reasoning)
  })
})

// --- OpenAI Responses ---------------------------------------------------------------------

describe('openaiResponses frames, read by the openai SDK', () => {
  type Event = OpenAI.Responses.ResponseStreamEvent
  const textOf = (events: Event[]) =>
    events.map((event) => (event.type === 'response.output_text.delta' ? event.delta : '')).join('')

  it('renderError after output: text deltas first, then an APIError with a sanitised message', async () => {
    const { parts, tracker } = await errorAfter(
      openaiResponses,
      responses.output.file,
      responses.output.frames,
      responses.error,
    )
    expect(tracker.state.visibleText).toBe(responses.output.text)
    const events: Event[] = []
    const stream = await openaiWith(parts).responses.create({ ...responsesRequest, stream: true })
    const error = await drain(stream, (event) => events.push(event))
    expect(textOf(events)).toBe(responses.output.text)
    expectOpenAIError(error, responses.error.type)
  })

  it('renderError after output: the stream() helper rejects finalResponse() with the APIError', async () => {
    const { parts } = await errorAfter(
      openaiResponses,
      responses.output.file,
      responses.output.frames,
      responses.error,
    )
    let text = ''
    const runner = openaiWith(parts)
      .responses.stream(responsesRequest)
      .on('response.output_text.delta', (event) => {
        text += event.delta
      })
    const error = await rejection(runner.finalResponse())
    expect(text).toBe(responses.output.text)
    expectOpenAIError(error, responses.error.type)
  })

  it('renderError after response.created / in_progress: the SDK throws the APIError', async () => {
    const { parts } = await errorAfter(
      openaiResponses,
      responses.preamble.file,
      responses.preamble.frames,
      responses.error,
    )
    const events: Event[] = []
    const stream = await openaiWith(parts).responses.create({ ...responsesRequest, stream: true })
    const error = await drain(stream, (event) => events.push(event))
    expect(events.map((event) => event.type)).toEqual(['response.created', 'response.in_progress'])
    expectOpenAIError(error, responses.error.type)
  })

  it('renderStop after output: response.completed arrives, sequence numbers continue', async () => {
    const { parts } = await stopAfter(
      openaiResponses,
      responses.output.file,
      responses.output.frames,
    )
    const events: Event[] = []
    const stream = await openaiWith(parts).responses.create({ ...responsesRequest, stream: true })
    const error = await drain(stream, (event) => events.push(event))
    expect(error).toBeUndefined()
    expect(textOf(events)).toBe(responses.output.text)
    const last = events.at(-1)
    expect(last?.type).toBe('response.completed')
    if (last?.type === 'response.completed') expect(last.response.status).toBe('completed')
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, i) => i))
  })

  it('renderStop after output: finalResponse() is completed and output_text is the text', async () => {
    const { parts } = await stopAfter(
      openaiResponses,
      responses.output.file,
      responses.output.frames,
    )
    const response = await openaiWith(parts).responses.stream(responsesRequest).finalResponse()
    expect(response.status).toBe('completed')
    expect(response.output_text).toBe(responses.output.text)
  })

  it('reasoning promoted to text, then renderStop: finalResponse() output_text is the reasoning', async () => {
    const { parts, tracker } = await promoted(openaiResponses, responses.thinking)
    expect(tracker.state.visibleText).toBe(responses.thinking.reasoning)
    const events: Event[] = []
    const runner = openaiWith(parts)
      .responses.stream(responsesRequest)
      .on('event', (event) => events.push(event))
    const response = await runner.finalResponse()
    expect(textOf(events)).toBe(responses.thinking.reasoning)
    expect(events.at(-1)?.type).toBe('response.completed')
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, i) => i))
    expect(response.status).toBe('completed')
    expect(response.output_text).toBe(responses.thinking.reasoning)
  })
})

// --- Anthropic Messages -------------------------------------------------------------------

describe('anthropicMessages frames, read by the @anthropic-ai/sdk SDK', () => {
  type Event = Anthropic.RawMessageStreamEvent
  const textOf = (events: Event[]) =>
    events
      .map((event) =>
        event.type === 'content_block_delta' && event.delta.type === 'text_delta'
          ? event.delta.text
          : '',
      )
      .join('')
  const visibleText = (message: Anthropic.Message) =>
    message.content.map((block) => (block.type === 'text' ? block.text : '')).join('')

  function expectAnthropicError(error: unknown): void {
    expect(error).toBeInstanceOf(Anthropic.APIError)
    if (!(error instanceof Anthropic.APIError)) return
    expect(error.type).toBe('overloaded_error')
    expect(error.error).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } })
    expectHonestMessage(error)
  }

  it('renderError after output: text deltas first, then an APIError carrying the type', async () => {
    const { parts, tracker } = await errorAfter(
      anthropicMessages,
      messages.output.file,
      messages.output.frames,
      messages.error,
    )
    expect(tracker.state.visibleText).toBe(messages.output.text)
    const events: Event[] = []
    const stream = await anthropicWith(parts).messages.create({ ...messagesRequest, stream: true })
    const error = await drain(stream, (event) => events.push(event))
    expect(textOf(events)).toBe(messages.output.text)
    expectAnthropicError(error)
  })

  it('renderError after output: the stream() helper rejects finalMessage() with the APIError', async () => {
    const { parts } = await errorAfter(
      anthropicMessages,
      messages.output.file,
      messages.output.frames,
      messages.error,
    )
    let text = ''
    const runner = anthropicWith(parts)
      .messages.stream(messagesRequest)
      .on('text', (delta) => {
        text += delta
      })
    const error = await rejection(runner.finalMessage())
    expect(text).toBe(messages.output.text)
    expectAnthropicError(error)
  })

  it('renderError after message_start + ping: the SDK throws the APIError', async () => {
    const { parts } = await errorAfter(
      anthropicMessages,
      messages.preamble.file,
      messages.preamble.frames,
      messages.error,
    )
    const events: Event[] = []
    const stream = await anthropicWith(parts).messages.create({ ...messagesRequest, stream: true })
    const error = await drain(stream, (event) => events.push(event))
    expect(events.map((event) => event.type)).toEqual(['message_start'])
    expectAnthropicError(error)
  })

  it('renderStop after output: message_delta says end_turn, then message_stop', async () => {
    const { parts } = await stopAfter(
      anthropicMessages,
      messages.output.file,
      messages.output.frames,
    )
    const events: Event[] = []
    const stream = await anthropicWith(parts).messages.create({ ...messagesRequest, stream: true })
    const error = await drain(stream, (event) => events.push(event))
    expect(error).toBeUndefined()
    expect(textOf(events)).toBe(messages.output.text)
    expect(events.slice(-3).map((event) => event.type)).toEqual([
      'content_block_stop',
      'message_delta',
      'message_stop',
    ])
    const delta = events.at(-2)
    if (delta?.type === 'message_delta') expect(delta.delta.stop_reason).toBe('end_turn')
  })

  it('renderStop after output: finalMessage() has stop_reason end_turn and the text', async () => {
    const { parts } = await stopAfter(
      anthropicMessages,
      messages.output.file,
      messages.output.frames,
    )
    const message = await anthropicWith(parts).messages.stream(messagesRequest).finalMessage()
    expect(message.stop_reason).toBe('end_turn')
    expect(visibleText(message)).toBe(messages.output.text)
  })

  it('reasoning promoted to text, then renderStop: the visible text is the reasoning', async () => {
    const { parts, tracker } = await promoted(anthropicMessages, messages.thinking)
    expect(tracker.state.visibleText).toBe(messages.thinking.reasoning)
    const events: Event[] = []
    const stream = await anthropicWith(parts).messages.create({ ...messagesRequest, stream: true })
    const error = await drain(stream, (event) => events.push(event))
    expect(error).toBeUndefined()
    expect(textOf(events)).toBe(messages.thinking.reasoning)
    expect(events.at(-1)?.type).toBe('message_stop')
  })

  it('reasoning promoted to text, then renderStop: finalMessage() text blocks hold the reasoning', async () => {
    const { parts } = await promoted(anthropicMessages, messages.thinking)
    const message = await anthropicWith(parts).messages.stream(messagesRequest).finalMessage()
    expect(message.stop_reason).toBe('end_turn')
    expect(message.content.map((block) => block.type)).toEqual(['thinking', 'text'])
    expect(visibleText(message)).toBe(messages.thinking.reasoning)
  })
})
