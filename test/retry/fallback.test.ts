import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import {
  classifyConnectionError,
  contextWindowFitDefaults,
  parseContextOverflow,
} from '../../src/advanced.js'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  fitContextWindow,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type RelayOutcome,
  type RelayPolicy,
} from '../../src/index.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

const answer = 'The quick brown fox jumps over the lazy dog.'

function setup(scenario: Scenario, policy: RelayPolicy = {}, baseURL = 'http://upstream.test') {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const outcomes: RelayOutcome[] = []
  const pool = createMemoryKeyPool([
    { id: 'a', secret: 'sk-fallback-a-1234567890' },
    { id: 'b', secret: 'sk-fallback-b-1234567890' },
  ])
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    pool,
    policy: { backoff: { baseMs: 1 }, ...policy },
    onOutcome: (o) => outcomes.push(o),
  })
  const headers = { 'x-fault-scenario': 's' }
  return {
    upstream,
    outcomes,
    openai: new OpenAI({
      apiKey: 'sk-x',
      baseURL: `${baseURL}/v1`,
      fetch,
      maxRetries: 0,
      defaultHeaders: headers,
    }),
    anthropic: new Anthropic({
      apiKey: 'sk-x',
      baseURL,
      fetch,
      maxRetries: 0,
      defaultHeaders: headers,
    }),
  }
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 10))

describe('non-streaming fallback', () => {
  let close: (() => Promise<void>) | undefined
  afterEach(async () => {
    await close?.()
  })

  it('a 404 to the streaming request falls back at once; the OpenAI SDK streams the same text and stop reason', async () => {
    const { openai, upstream, outcomes } = setup(['streaming-unsupported'], {
      nonStreamingFallback: true,
    })
    close = upstream.close
    const completion = await openai.chat.completions
      .stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
      .finalChatCompletion()
    expect(completion.choices[0]?.message.content).toBe(answer)
    expect(completion.choices[0]?.finish_reason).toBe('stop')
    expect(upstream.requests.map((r) => JSON.parse(r.body).stream)).toEqual([true, false])
    await settle()
    expect(outcomes[0]).toMatchObject({ kind: 'committed', mode: 'non-streaming' })
    expect(outcomes[0]?.attempts.map((a) => [a.mode, a.result])).toEqual([
      ['stream', 'streaming-unsupported'],
      ['non-streaming', 'committed'],
    ])
  })

  it('the Anthropic SDK gets the same message through the fallback', async () => {
    const { anthropic, upstream } = setup(['streaming-unsupported'], { nonStreamingFallback: true })
    close = upstream.close
    const message = await anthropic.messages
      .stream({ model: 'claude-test', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    expect(message.content.map((b) => (b.type === 'text' ? b.text : ''))).toEqual([answer])
    expect(message.stop_reason).toBe('end_turn')
  })

  it('the OpenAI Responses SDK gets the same output text through the fallback', async () => {
    const { openai, upstream } = setup(['streaming-unsupported'], { nonStreamingFallback: true })
    close = upstream.close
    const response = await openai.responses.stream({ model: 'm', input: 'hi' }).finalResponse()
    expect(response.output_text).toBe(answer)
    expect(response.status).toBe('completed')
  })

  it('after the streaming attempts fail before output, one non-streaming request answers', async () => {
    const { openai, upstream, outcomes } = setup(['empty', 'empty', 'ok'], {
      nonStreamingFallback: true,
      maxAttempts: 2,
    })
    close = upstream.close
    const stream = await openai.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    })
    let text = ''
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
    expect(text).toBe(answer)
    await settle()
    expect(outcomes[0]?.attempts.map((a) => a.mode)).toEqual(['stream', 'stream', 'non-streaming'])
  })

  it('is off by default: a 404 to the streaming request reaches the client', async () => {
    const { openai, upstream } = setup(['streaming-unsupported'])
    close = upstream.close
    const error = await openai.chat.completions
      .create({ model: 'm', messages: [], stream: true })
      .catch((e: unknown) => e)
    expect((error as { status?: number }).status).toBe(404)
    expect(upstream.requests).toHaveLength(1)
  })

  it('renders tool calls from a complete answer that the SDKs read back exactly', async () => {
    const chatMessage = {
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: null,
            tool_calls: [
              {
                id: 'call_a',
                type: 'function',
                function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
              },
              {
                id: 'call_b',
                type: 'function',
                function: { name: 'get_time', arguments: '{"tz":"CET"}' },
              },
            ],
          },
          finish_reason: 'tool_calls',
        },
      ],
    }
    const sse = (bytes: Uint8Array) => async () =>
      new Response(bytes as BodyInit, { headers: { 'content-type': 'text/event-stream' } })
    const openai = new OpenAI({
      apiKey: 'x',
      baseURL: 'http://x.test/v1',
      fetch: sse(openaiChat.renderFromMessage?.(chatMessage) as Uint8Array),
      maxRetries: 0,
    })
    const completion = await openai.chat.completions
      .stream({ model: 'm', messages: [] })
      .finalChatCompletion()
    expect(completion.choices[0]?.finish_reason).toBe('tool_calls')
    expect(
      completion.choices[0]?.message.tool_calls?.map((c) =>
        c.type === 'function' ? [c.id, c.function.name, c.function.arguments] : [],
      ),
    ).toEqual([
      ['call_a', 'get_weather', '{"city":"Paris"}'],
      ['call_b', 'get_time', '{"tz":"CET"}'],
    ])

    const anthropicMessage = {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude-test',
      content: [
        { type: 'text', text: 'Checking.' },
        { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris', days: 2 } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 5, output_tokens: 9 },
    }
    const anthropic = new Anthropic({
      apiKey: 'x',
      baseURL: 'http://x.test',
      fetch: sse(anthropicMessages.renderFromMessage?.(anthropicMessage) as Uint8Array),
      maxRetries: 0,
    })
    const message = await anthropic.messages
      .stream({ model: 'claude-test', max_tokens: 9, messages: [] })
      .finalMessage()
    expect(message.stop_reason).toBe('tool_use')
    expect(message.content).toEqual([
      { type: 'text', text: 'Checking.' },
      { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris', days: 2 } },
    ])
    expect(message.usage.output_tokens).toBe(9)
  })

  it('turns Gemini streaming into generateContent and its answer into one frame', () => {
    const request = geminiGenerateContent.nonStreamingRequest?.({
      url: 'https://g.test/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse',
      body: { contents: [] },
    })
    expect(request?.url).toBe('https://g.test/v1beta/models/gemini-2.5-flash:generateContent')
    const bytes = geminiGenerateContent.renderFromMessage?.({
      candidates: [{ content: { parts: [{ text: 'hi' }] }, finishReason: 'STOP' }],
    })
    expect(new TextDecoder().decode(bytes)).toMatch(
      /^data: \{"candidates".*"finishReason":"STOP".*\}\n\n$/,
    )
    expect(
      openaiResponses.nonStreamingRequest?.({ url: undefined, body: { stream: true } }).body,
    ).toEqual({ stream: false })
    expect(
      openaiChat.nonStreamingRequest?.({
        url: undefined,
        body: { stream: true, stream_options: { include_usage: true } },
      }).body,
    ).toEqual({ stream: false })
  })
})

describe('request-adjusting retries', () => {
  let close: (() => Promise<void>) | undefined
  afterEach(async () => {
    await close?.()
  })

  it('lowers max_tokens to fit the context window the error states, and retries once', async () => {
    const { anthropic, upstream, outcomes } = setup(
      [{ kind: 'context-overflow', limitTokens: 200_000, inputTokens: 188_240 }],
      {
        fitContextWindow: true,
      },
    )
    close = upstream.close
    const message = await anthropic.messages
      .stream({
        model: 'claude-test',
        max_tokens: 21_333,
        messages: [{ role: 'user', content: 'hi' }],
      })
      .finalMessage()
    expect(message.stop_reason).toBe('end_turn')
    expect(upstream.requests.map((r) => JSON.parse(r.body).max_tokens)).toEqual([
      21_333,
      200_000 - 188_240 - 1024,
    ])
    await settle()
    expect(outcomes[0]?.attempts[0]?.result).toBe('status-400:request-adjusted')
  })

  it('below the floor the original error stands, unretried', async () => {
    const { openai, upstream } = setup(
      [{ kind: 'context-overflow', limitTokens: 128_000, inputTokens: 126_000 }],
      { fitContextWindow: true },
    )
    close = upstream.close
    const error = await openai.chat.completions
      .create({ model: 'm', max_tokens: 8000, messages: [], stream: true })
      .catch((e: unknown) => e)
    expect((error as { status?: number }).status).toBe(400)
    expect((error as Error).message).toContain('maximum context length is 128000 tokens')
    expect(upstream.requests).toHaveLength(1)
  })

  it('a host adjustRequest hook can change the body after a refusal', async () => {
    const seen: number[] = []
    const { openai, upstream } = setup(
      [{ kind: 'context-overflow', limitTokens: 10_000, inputTokens: 9_000 }],
      {
        adjustRequest: ({ status, request }) => {
          if (status !== 400) return undefined
          seen.push(status)
          return { ...request.body, max_completion_tokens: 500 }
        },
      },
    )
    close = upstream.close
    const stream = await openai.chat.completions.create({
      model: 'm',
      max_completion_tokens: 4000,
      messages: [],
      stream: true,
    })
    let text = ''
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
    expect(text).toBe(answer)
    expect(seen).toEqual([400])
    expect(upstream.requests.map((r) => JSON.parse(r.body).max_completion_tokens)).toEqual([
      4000, 500,
    ])
  })

  it('reads both providers’ overflow wording, and fits each protocol’s field', () => {
    expect(
      parseContextOverflow(
        'input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length',
      ),
    ).toEqual({
      inputTokens: 188_240,
      limitTokens: 200_000,
    })
    expect(
      parseContextOverflow(
        "This model's maximum context length is 128000 tokens. However, you requested 130000 tokens (100000 in the messages, 30000 in the completion).",
      ),
    ).toEqual({ inputTokens: 100_000, limitTokens: 128_000 })
    expect(parseContextOverflow('something else')).toBeUndefined()
    const message = 'input length and max_tokens exceed context limit: 100000 + 50000 > 120000'
    expect(
      fitContextWindow(
        'openai-responses',
        { url: undefined, body: { max_output_tokens: 50_000 } },
        message,
      )?.body,
    ).toEqual({
      max_output_tokens: 120_000 - 100_000 - contextWindowFitDefaults.marginTokens,
    })
    expect(fitContextWindow('gemini', { url: undefined, body: {} }, message)?.body).toEqual({
      generationConfig: { maxOutputTokens: 18_976 },
    })
  })
})

describe('correlation ids', () => {
  let close: (() => Promise<void>) | undefined
  afterEach(async () => {
    await close?.()
  })

  it('sends x-client-request-id per attempt to the first-party API and reports it in the outcome; opt-out sends none', async () => {
    const { openai, upstream, outcomes } = setup(['empty', 'ok'], {}, 'https://api.openai.com')
    close = upstream.close
    const stream = await openai.chat.completions.create({ model: 'm', messages: [], stream: true })
    for await (const _ of stream) {
      // drain
    }
    await settle()
    const sent = upstream.requests.map((r) => r.headers['x-client-request-id'])
    expect(sent.every((id) => typeof id === 'string' && /^[0-9a-f-]{36}$/.test(id))).toBe(true)
    expect(new Set(sent).size).toBe(2)
    expect(outcomes[0]?.attempts.map((a) => a.requestId)).toEqual(sent)

    const quiet = setup(['ok'], { correlationIds: false }, 'https://api.openai.com')
    const quietStream = await quiet.openai.chat.completions.create({
      model: 'm',
      messages: [],
      stream: true,
    })
    for await (const _ of quietStream) {
      // drain
    }
    expect(quiet.upstream.requests[0]?.headers['x-client-request-id']).toBeUndefined()
    await quiet.upstream.close()
  })
})

describe('connection errors from other runtimes', () => {
  it.each([
    [
      'Bun refused',
      Object.assign(new Error('Unable to connect'), { code: 'ConnectionRefused' }),
      true,
      'ECONNREFUSED',
    ],
    [
      'Deno refused',
      new TypeError(
        'error sending request for url (http://x): client error (Connect): tcp connect error: Connection refused (os error 111)',
      ),
      true,
      undefined,
    ],
    [
      'Deno certificate',
      new TypeError('client error (Connect): invalid peer certificate: UnknownIssuer'),
      false,
      undefined,
    ],
    [
      'timeout signal',
      new DOMException('The operation timed out.', 'TimeoutError'),
      true,
      'ETIMEDOUT',
    ],
    [
      'caller abort',
      new DOMException('This operation was aborted', 'AbortError'),
      false,
      'ABORT_ERR',
    ],
  ])('%s', (_name, error, retryable, code) => {
    const verdict = classifyConnectionError(error)
    expect(verdict.retryable).toBe(retryable)
    expect(verdict.code).toBe(code)
    expect(verdict.message).not.toBe('')
  })

  it('says what to check for a Deno certificate failure', () => {
    expect(
      classifyConnectionError(new TypeError('invalid peer certificate: UnknownIssuer')).message,
    ).toContain('corporate CA')
  })
})
