import { createServer } from 'node:http'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createFrameReader,
  createResilientFetch,
  createStreamTracker,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type RelayOutcome,
  relay,
  type StreamAdapter,
  webSink,
} from '../../src/index.js'
import {
  anthropicUsage,
  chatUsageOf,
  geminiUsage,
  mergeUsage,
  responsesUsage,
} from '../../src/protocols/usage.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { chunk, done } from '../support/chat-upstream.js'
import { useLoopback } from '../support/loopback.js'

/** Chat's `usage` object, read as the Chat adapter reads it from a chunk. */
const chatReport = (usage: unknown) => chatUsageOf({ usage })

/**
 * Token usage in every outcome: each shipped adapter reads what its protocol reports, in a
 * stream and in a whole answer, and the relay puts the answer's usage in the outcome and each
 * attempt's in its record. The faulty upstream reports 10 input and 12 output tokens in
 * every protocol's own way (Anthropic in two steps).
 */

const endpoints: readonly [StreamAdapter, string, (stream: boolean) => string][] = [
  [
    openaiChat,
    'https://api.test/v1/chat/completions',
    () => 'https://api.test/v1/chat/completions',
  ],
  [openaiResponses, 'https://api.test/v1/responses', () => 'https://api.test/v1/responses'],
  [anthropicMessages, 'https://api.test/v1/messages', () => 'https://api.test/v1/messages'],
  [
    geminiGenerateContent,
    'gemini',
    (stream) =>
      stream
        ? 'https://api.test/v1beta/models/m:streamGenerateContent?alt=sse'
        : 'https://api.test/v1beta/models/m:generateContent',
  ],
]

async function outcomeOf(
  adapter: StreamAdapter,
  url: string,
  stream: boolean,
  scenario: Scenario,
): Promise<RelayOutcome> {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  let outcome: RelayOutcome | undefined
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    adapter,
    policy: { backoff: { baseMs: 1, maxMs: 2 } },
    onOutcome: (ended) => {
      outcome = ended
    },
  })
  const body =
    adapter === geminiGenerateContent
      ? { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }
      : {
          model: 'm',
          stream,
          messages: [{ role: 'user', content: 'hi' }],
          input: 'hi',
          max_tokens: 8,
        }
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
    body: JSON.stringify(body),
  })
  await response.text()
  await expect.poll(() => outcome).toBeDefined()
  return outcome as RelayOutcome
}

describe('token usage in the outcome, as the upstream reported it', () => {
  for (const [adapter, , urlFor] of endpoints) {
    describe(adapter.name, () => {
      it.each([true, false])('stream: %s — 10 input and 12 output tokens', async (stream) => {
        const outcome = await outcomeOf(adapter, urlFor(stream), stream, ['ok'])
        expect(outcome).toMatchObject({
          kind: 'committed',
          usage: { inputTokens: 10, outputTokens: 12 },
        })
        if (outcome.kind !== 'committed') return
        expect(outcome.attempts.at(-1)?.usage).toEqual(outcome.usage)
      })
    })
  }

  it('a failed attempt keeps what it was billed for where the protocol says: Anthropic’s message_start before an error frame', async () => {
    const outcome = await outcomeOf(anthropicMessages, 'https://api.test/v1/messages', true, [
      'error-frame',
      'ok',
    ])
    expect(outcome.kind).toBe('committed')
    expect(outcome.attempts.map((attempt) => attempt.usage)).toEqual([
      { inputTokens: 10, outputTokens: 1 },
      { inputTokens: 10, outputTokens: 12 },
    ])
  })

  it('an attempt that reported nothing has no usage', async () => {
    const outcome = await outcomeOf(openaiChat, 'https://api.test/v1/chat/completions', true, [
      'empty',
      'ok',
    ])
    expect(outcome.attempts[0]?.usage).toBeUndefined()
    expect(outcome.attempts[1]?.usage).toEqual({ inputTokens: 10, outputTokens: 12 })
  })
})

describe('usage readers', () => {
  it('read each protocol’s fields, cached and reasoning tokens included', () => {
    expect(
      chatReport({
        prompt_tokens: 100,
        completion_tokens: 40,
        prompt_tokens_details: { cached_tokens: 64 },
        completion_tokens_details: { reasoning_tokens: 30 },
      }),
    ).toEqual({ inputTokens: 100, outputTokens: 40, cachedInputTokens: 64, reasoningTokens: 30 })
    expect(
      responsesUsage({
        input_tokens: 100,
        output_tokens: 40,
        input_tokens_details: { cached_tokens: 64 },
        output_tokens_details: { reasoning_tokens: 30 },
      }),
    ).toEqual({ inputTokens: 100, outputTokens: 40, cachedInputTokens: 64, reasoningTokens: 30 })
    // Anthropic's input_tokens leaves the cache out: every input token is counted.
    expect(
      anthropicUsage({
        input_tokens: 10,
        output_tokens: 5,
        cache_read_input_tokens: 64,
        cache_creation_input_tokens: 26,
      }),
    ).toEqual({
      inputTokens: 100,
      outputTokens: 5,
      cachedInputTokens: 64,
      cacheCreationInputTokens: 26,
    })
    // Gemini's candidates leave the thoughts out: every output token is counted.
    expect(
      geminiUsage({
        promptTokenCount: 100,
        candidatesTokenCount: 10,
        thoughtsTokenCount: 30,
        cachedContentTokenCount: 64,
      }),
    ).toEqual({ inputTokens: 100, outputTokens: 40, cachedInputTokens: 64, reasoningTokens: 30 })
  })

  it('ignore what is not a count, and report nothing when nothing was reported', () => {
    expect(chatReport(null)).toBeUndefined()
    expect(chatReport({ prompt_tokens: -1, completion_tokens: 1.5 })).toBeUndefined()
    expect(geminiUsage({ promptTokenCount: '10' })).toBeUndefined()
  })

  it('merge steps of one stream: the later report wins field by field, even when lower', () => {
    expect(
      mergeUsage({ inputTokens: 100, outputTokens: 1 }, { inputTokens: 10, outputTokens: 12 }),
    ).toEqual({
      inputTokens: 10,
      outputTokens: 12,
    })
    // A field the later report leaves out keeps its earlier value.
    expect(mergeUsage({ inputTokens: 100, reasoningTokens: 3 }, { outputTokens: 12 })).toEqual({
      inputTokens: 100,
      outputTokens: 12,
      reasoningTokens: 3,
    })
    expect(mergeUsage(undefined, 'garbage' as never)).toBeUndefined()
  })

  it('Chat: reasoning is added to completion_tokens only when the report’s own total left it out (xAI)', () => {
    // 12 + 1 + 290 = 303: completion_tokens does not include the reasoning.
    expect(
      chatReport({
        prompt_tokens: 12,
        completion_tokens: 1,
        total_tokens: 303,
        completion_tokens_details: { reasoning_tokens: 290 },
      }),
    ).toEqual({ inputTokens: 12, outputTokens: 291, reasoningTokens: 290 })
    // OpenAI's convention: 100 + 40 = 140, completion_tokens includes the reasoning.
    expect(
      chatReport({
        prompt_tokens: 100,
        completion_tokens: 40,
        total_tokens: 140,
        completion_tokens_details: { reasoning_tokens: 30 },
      }),
    ).toEqual({ inputTokens: 100, outputTokens: 40, reasoningTokens: 30 })
  })
})

const utf8 = new TextEncoder()

/** The usage a tracker reads from a whole stream of the adapter's protocol. */
async function trackedUsage(adapter: StreamAdapter, frames: readonly string[]) {
  const tracker = createStreamTracker(adapter)
  const bytes = utf8.encode(frames.join(''))
  const reader = createFrameReader(new Response(bytes).body as ReadableStream<Uint8Array>)
  for (let frame = await reader.next(); frame; frame = await reader.next()) tracker.observe(frame)
  return tracker.state.usage
}

const data = (body: unknown) => `data: ${JSON.stringify(body)}\n\n`
const anthropicEvent = (type: string, body: Record<string, unknown>) =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`

describe('usage of a stream, by the one rule: the later report wins field by field', () => {
  it('Chat from Groq: the usage inside x_groq on the last chunk', async () => {
    const usage = await trackedUsage(openaiChat, [
      data({ id: 'c', choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null }] }),
      data({
        id: 'c',
        choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
        x_groq: {
          id: 'req_1',
          usage: { prompt_tokens: 18, completion_tokens: 7, total_tokens: 25 },
        },
      }),
      'data: [DONE]\n\n',
    ])
    expect(usage).toEqual({ inputTokens: 18, outputTokens: 7 })
  })

  it('Chat from xAI: 12/1/303 with 290 reasoning tokens is 291 output tokens', async () => {
    const usage = await trackedUsage(openaiChat, [
      data({ id: 'c', choices: [{ index: 0, delta: { content: '4' }, finish_reason: 'stop' }] }),
      data({
        id: 'c',
        choices: [],
        usage: {
          prompt_tokens: 12,
          completion_tokens: 1,
          total_tokens: 303,
          completion_tokens_details: { reasoning_tokens: 290 },
        },
      }),
      'data: [DONE]\n\n',
    ])
    expect(usage).toEqual({ inputTokens: 12, outputTokens: 291, reasoningTokens: 290 })
  })

  it('Anthropic: message_delta’s usage is the final report, lower or not (612 at start, 28 at the end)', async () => {
    const usage = await trackedUsage(anthropicMessages, [
      anthropicEvent('message_start', {
        message: { id: 'msg_1', usage: { input_tokens: 612, output_tokens: 1 } },
      }),
      anthropicEvent('content_block_start', {
        index: 0,
        content_block: { type: 'text', text: '' },
      }),
      anthropicEvent('content_block_delta', {
        index: 0,
        delta: { type: 'text_delta', text: 'Hi' },
      }),
      anthropicEvent('content_block_stop', { index: 0 }),
      anthropicEvent('message_delta', {
        delta: { stop_reason: 'end_turn' },
        usage: { input_tokens: 28, output_tokens: 9 },
      }),
      anthropicEvent('message_stop', {}),
    ])
    expect(usage).toEqual({ inputTokens: 28, outputTokens: 9 })
  })

  it('Anthropic: a message_delta that leaves the cache counts out keeps the earlier ones in inputTokens', async () => {
    const usage = await trackedUsage(anthropicMessages, [
      anthropicEvent('message_start', {
        message: {
          id: 'msg_1',
          usage: {
            input_tokens: 10,
            cache_read_input_tokens: 64,
            cache_creation_input_tokens: 26,
            output_tokens: 1,
          },
        },
      }),
      anthropicEvent('message_delta', {
        delta: { stop_reason: 'end_turn' },
        usage: { input_tokens: 12, output_tokens: 5 },
      }),
    ])
    expect(usage).toEqual({
      inputTokens: 102,
      outputTokens: 5,
      cachedInputTokens: 64,
      cacheCreationInputTokens: 26,
    })
  })

  it('Anthropic with compaction: the sums over the iterations, as billed (60997/3341), and thinking_tokens as reasoning', async () => {
    const usage = await trackedUsage(anthropicMessages, [
      anthropicEvent('message_start', {
        message: { id: 'msg_1', usage: { input_tokens: 60385, output_tokens: 1 } },
      }),
      anthropicEvent('message_delta', {
        delta: { stop_reason: 'end_turn' },
        usage: {
          input_tokens: 612,
          output_tokens: 2819,
          output_tokens_details: { thinking_tokens: 400 },
          iterations: [
            { type: 'compaction', input_tokens: 60385, output_tokens: 522 },
            { type: 'message', input_tokens: 612, output_tokens: 2819 },
          ],
        },
      }),
    ])
    expect(usage).toEqual({ inputTokens: 60997, outputTokens: 3341, reasoningTokens: 400 })
  })

  it("Anthropic with the advisor tool: an iteration that names its own model (another model's, billed as that model) is left out of the sums", async () => {
    const usage = await trackedUsage(anthropicMessages, [
      anthropicEvent('message_start', {
        message: { id: 'msg_1', usage: { input_tokens: 1051, output_tokens: 1 } },
      }),
      anthropicEvent('message_delta', {
        delta: { stop_reason: 'end_turn' },
        usage: {
          input_tokens: 4727,
          output_tokens: 3391,
          iterations: [
            { type: 'message', input_tokens: 1051, output_tokens: 35 },
            {
              type: 'advisor_message',
              model: 'claude-opus-4-7',
              input_tokens: 2728,
              output_tokens: 3880,
            },
            { type: 'message', input_tokens: 3676, output_tokens: 3356 },
          ],
        },
      }),
    ])
    expect(usage).toEqual({ inputTokens: 4727, outputTokens: 3391 })
  })

  it('Gemini: each usageMetadata is a snapshot, the last one wins (prompt 15, 15, then 14; output 169, then 79)', async () => {
    const part = (text: string, finish?: string) => ({
      candidates: [
        {
          content: { role: 'model', parts: [{ text }] },
          ...(finish ? { finishReason: finish } : {}),
        },
      ],
    })
    const usage = await trackedUsage(geminiGenerateContent, [
      data({ ...part('a'), usageMetadata: { promptTokenCount: 15, candidatesTokenCount: 169 } }),
      data({ ...part('b'), usageMetadata: { promptTokenCount: 15, candidatesTokenCount: 169 } }),
      data({
        ...part('c', 'STOP'),
        usageMetadata: { promptTokenCount: 14, candidatesTokenCount: 79, totalTokenCount: 93 },
      }),
    ])
    expect(usage).toEqual({ inputTokens: 14, outputTokens: 79 })
  })

  it('Gemini: thoughts without candidates are the output (87 prompt, 78 thoughts, total 165 gives 78)', async () => {
    const usage = await trackedUsage(geminiGenerateContent, [
      data({
        candidates: [{ content: { role: 'model', parts: [{ text: 'a' }] } }],
        usageMetadata: {
          promptTokenCount: 87,
          candidatesTokenCount: 15,
          thoughtsTokenCount: 78,
          totalTokenCount: 180,
        },
      }),
      data({
        candidates: [{ content: { role: 'model', parts: [{ text: '' }] }, finishReason: 'STOP' }],
        usageMetadata: { promptTokenCount: 87, thoughtsTokenCount: 78, totalTokenCount: 165 },
      }),
    ])
    expect(usage).toEqual({ inputTokens: 87, outputTokens: 78, reasoningTokens: 78 })
  })

  it('Gemini: the built-in tools’ prompt (toolUsePromptTokenCount) counts as input', () => {
    expect(
      geminiUsage({
        promptTokenCount: 9,
        toolUsePromptTokenCount: 764,
        candidatesTokenCount: 120,
        totalTokenCount: 893,
      }),
    ).toEqual({ inputTokens: 773, outputTokens: 120 })
  })
})

describe('relay() reports the usage its own tracker reads', () => {
  const { listen } = useLoopback()

  // OpenRouter: usage on a chunk after the finish that repeats a choice with a null finish.
  const openRouter = [
    chunk({ role: 'assistant', content: '' }),
    chunk({ content: 'Hello' }),
    chunk({ content: ' world' }),
    chunk({}, 'stop'),
    'data: {"id":"gen-1","provider":"OpenAI","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null,"native_finish_reason":null}],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14,"cost":0.00005}}\n\n',
    done,
  ]

  it.each([
    ['in one write', [openRouter.join('')]],
    ['frame by frame', openRouter],
  ])(
    'OpenRouter’s usage chunk after the finish (%s): 12/2, as the tracker reads it',
    async (_, frames) => {
      const upstream = createServer((req, res) => {
        req.resume()
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        void (async () => {
          for (const frame of frames) {
            res.write(frame)
            await new Promise((resolve) => setTimeout(resolve, 2))
          }
          res.end()
        })()
      })
      const url = await listen(upstream)
      const { sink, response } = webSink()
      const outcome = relay({
        sink,
        adapter: openaiChat,
        attempt: ({ signal }) => fetch(`${url}/v1/chat/completions`, { method: 'POST', signal }),
      })
      const body = await (await response).text()
      const ended = await outcome
      expect(body).toBe(openRouter.join(''))
      expect(await trackedUsage(openaiChat, openRouter)).toEqual({
        inputTokens: 12,
        outputTokens: 2,
      })
      expect(ended).toMatchObject({
        kind: 'committed',
        usage: { inputTokens: 12, outputTokens: 2 },
      })
    },
  )

  it('the same through createResilientFetch (one engine)', async () => {
    const upstream = createServer((req, res) => {
      req.resume()
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(openRouter.join(''))
    })
    const url = await listen(upstream)
    let outcome: RelayOutcome | undefined
    const resilient = createResilientFetch({
      adapter: openaiChat,
      onOutcome: (ended) => {
        outcome = ended
      },
    })
    const response = await resilient(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    })
    expect(await response.text()).toBe(openRouter.join(''))
    await expect.poll(() => outcome).toBeDefined()
    expect(outcome).toMatchObject({
      kind: 'committed',
      usage: { inputTokens: 12, outputTokens: 2 },
    })
  })
})
