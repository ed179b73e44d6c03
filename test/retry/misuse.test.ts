/**
 * Mistakes a gateway author makes, named instead of absorbed: a client protocol with no
 * translator, and an attempt function whose HTTP helper throws on a non-2xx status.
 */
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  type DownstreamOptions,
  geminiGenerateContent,
  openaiChat,
  openaiChatWith,
  openaiResponses,
  type RelayOutcome,
  relay,
} from '../../src/index.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { createRecordingSink } from '../../src/testing/index.js'
import { fixtureBytes } from '../protocols/fixtures.js'

const pool = () =>
  createMemoryKeyPool([
    { id: 'a', secret: 'sk-misuse-a-1234567890' },
    { id: 'b', secret: 'sk-misuse-b-1234567890' },
    { id: 'c', secret: 'sk-misuse-c-1234567890' },
  ])
const chatRequest = (stream: boolean) => ({
  url: 'https://api.test/v1/chat/completions',
  body: { model: 'm', stream, messages: [{ role: 'user', content: 'hi' }] },
})
const chatStream = () =>
  new Response(fixtureBytes('openai-chat/text.sse').slice(), {
    headers: { 'content-type': 'text/event-stream' },
  })
const missing =
  /policy\.downstream\.adapter is anthropic-messages but the upstream adapter is openai-chat.*no translator/

describe('continueAfterCut with an adapter that cannot continue is named, never silent', () => {
  const cannot =
    /continueAfterCut is on but no upstream adapter can continue a cut answer \(openai-chat/
  /** A Chat stream cut after its first text: no final chunk, no `[DONE]`. */
  const cutStream = () =>
    new Response(
      'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"The "},"finish_reason":null}]}\n\n',
      { headers: { 'content-type': 'text/event-stream' } },
    )

  it('createResilientFetch({ adapter }): a TypeError when it is made (its one protocol cannot)', () => {
    expect(() =>
      createResilientFetch({ adapter: openaiChat, policy: { continueAfterCut: true } }),
    ).toThrow(cannot)
    expect(() =>
      createResilientFetch({ adapter: geminiGenerateContent, policy: { continueAfterCut: {} } }),
    ).toThrow(/\(gemini/)
    expect(() =>
      createResilientFetch({
        adapter: openaiChatWith({ continuation: 'vllm-continue' }),
        policy: { continueAfterCut: true },
      }),
    ).not.toThrow()
  })

  it('relay() (a policy endpoints of several protocols share): the cut is told and recorded `unsupported`', async () => {
    const told: string[] = []
    let sent = 0
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: pool(),
      adapter: openaiChat,
      request: chatRequest(true),
      attempt: async () => {
        sent++
        return cutStream()
      },
      policy: { continueAfterCut: true },
      hooks: { onContinuation: (record) => told.push(record.result) },
    })
    expect(sent).toBe(1)
    expect(outcome).toMatchObject({
      kind: 'committed',
      result: 'cut',
      continuations: [{ result: 'unsupported', attempts: 0, keyId: null }],
    })
    expect(told).toEqual(['unsupported'])
  })

  it('createResilientFetch() picking the adapter by URL: recorded `unsupported` too', async () => {
    const outcomes: RelayOutcome[] = []
    const fetch = createResilientFetch({
      fetch: async () => cutStream(),
      policy: { continueAfterCut: true },
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    const answered = await fetch('http://api.test/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify(chatRequest(true).body),
    })
    expect(await answered.text()).toContain('error')
    await expect.poll(() => outcomes.length).toBe(1)
    expect(outcomes[0]).toMatchObject({ continuations: [{ result: 'unsupported' }] })
  })
})

describe('a client protocol without a translator is a TypeError naming both protocols', () => {
  it.each([
    ['streaming', true],
    ['non-streaming', false],
  ])(
    'relay(), %s: nothing is sent, the client is answered a 500 in its protocol',
    async (_, stream) => {
      let sent = 0
      const sink = createRecordingSink()
      await expect(
        relay({
          sink,
          pool: pool(),
          adapter: openaiChat,
          request: chatRequest(stream),
          attempt: async () => {
            sent++
            return chatStream()
          },
          policy: { downstream: { adapter: anthropicMessages } },
        }),
      ).rejects.toThrow(missing)
      expect(sent).toBe(0)
      expect(sink.events.map((event) => event.type)).toEqual(['head', 'write', 'close'])
      expect(sink.events[0]).toMatchObject({ status: 500 })
    },
  )

  it('relay(): a fallback route in another protocol than the client’s is named too', async () => {
    const attempt = async () => chatStream()
    await expect(
      relay({
        sink: createRecordingSink(),
        pool: pool(),
        adapter: openaiChat,
        attempt,
        policy: {
          downstream: { adapter: openaiChat },
          routes: [{ name: 'responses', adapter: openaiResponses, attempt }],
        },
      }),
    ).rejects.toThrow(
      /policy\.downstream\.adapter is openai-chat but the upstream adapter is openai-responses/,
    )
  })

  it('createResilientFetch({ adapter }): thrown when it is created', () => {
    expect(() =>
      createResilientFetch({
        adapter: openaiChat,
        policy: { downstream: { adapter: anthropicMessages } },
      }),
    ).toThrow(missing)
  })

  it('createResilientFetch() picking the adapter by URL: the request rejects with it, nothing is sent', async () => {
    let sent = 0
    const fetch = createResilientFetch({
      fetch: async () => {
        sent++
        return chatStream()
      },
      policy: { downstream: { adapter: anthropicMessages } },
    })
    await expect(
      fetch('http://api.test/v1/chat/completions', {
        method: 'POST',
        body: JSON.stringify(chatRequest(true).body),
      }),
    ).rejects.toThrow(/anthropic-messages but the upstream adapter is openai-chat/)
    expect(sent).toBe(0)
  })

  const accepted: [string, DownstreamOptions][] = [
    ['the same adapter', { adapter: openaiChat }],
    ['the same protocol in another object', { adapter: { ...openaiChat } }],
    ['a transform', { adapter: anthropicMessages, transform: (frame) => frame.raw }],
  ]
  it.each(accepted)('accepted: %s', async (_, downstream) => {
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      pool: pool(),
      adapter: openaiChat,
      attempt: async () => chatStream(),
      policy: { downstream },
    })
    expect(outcome.kind).toBe('committed')
  })
})

/** An error as gateways' HTTP helpers throw it on a non-2xx answer. */
function httpError(fields: Record<string, unknown>): Error {
  return Object.assign(new Error(`HTTP ${String(fields.status ?? 'error')}`), fields)
}

const notFoundBody = JSON.stringify({
  error: {
    message: 'The model `m-x` does not exist',
    type: 'invalid_request_error',
    code: 'model_not_found',
  },
})

describe('an attempt that throws an error carrying the upstream’s answer is judged as that answer', () => {
  const forms: [string, () => Error][] = [
    [
      'error.response (a Response)',
      () =>
        httpError({
          response: new Response(notFoundBody, {
            status: 404,
            headers: { 'content-type': 'application/json' },
          }),
        }),
    ],
    ['error.status (a number)', () => httpError({ status: 404 })],
  ]
  for (const stream of [true, false]) {
    it.each(forms)(
      `${stream ? 'streaming' : 'non-streaming'}: a thrown 404 as %s is one attempt and the client's 404, not three and a 502`,
      async (form, make) => {
        let sent = 0
        const sink = createRecordingSink()
        const outcome = await relay({
          sink,
          pool: pool(),
          adapter: openaiChat,
          request: chatRequest(stream),
          attempt: async () => {
            sent++
            throw make()
          },
          policy: { maxAttempts: 3, backoff: { baseMs: 1, maxMs: 2 } },
        })
        expect(sent).toBe(1)
        expect(outcome).toMatchObject({ kind: 'failed', status: 404 })
        expect(sink.status).toBe(404)
        if (form.startsWith('error.response')) expect(sink.text).toContain('model_not_found')
      },
    )
  }

  it('a thrown 429 with retry-after headers (a plain object) rotates to another key; that key answers', async () => {
    const keys: string[] = []
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: pool(),
      adapter: openaiChat,
      attempt: async ({ key }) => {
        keys.push(key.id)
        if (keys.length === 1) throw httpError({ status: 429, headers: { 'retry-after': '30' } })
        return chatStream()
      },
      policy: { maxAttempts: 3, backoff: { baseMs: 1, maxMs: 2 } },
    })
    expect(outcome.kind).toBe('committed')
    expect(keys).toHaveLength(2)
    expect(keys[1]).not.toBe(keys[0])
    expect(outcome.attempts[0]).toMatchObject({ status: 429 })
  })

  it('a thrown 503 is retried as the upstream’s 503, not as a connection failure', async () => {
    let sent = 0
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: pool(),
      adapter: openaiChat,
      attempt: async () => {
        sent++
        if (sent === 1) throw httpError({ status: 503 })
        return chatStream()
      },
      policy: { maxAttempts: 3, backoff: { baseMs: 1, maxMs: 2 } },
    })
    expect(outcome.kind).toBe('committed')
    expect(outcome.attempts[0]).toMatchObject({ status: 503 })
  })

  it('a thrown 404 whose Response body the helper already read: the status is kept', async () => {
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      pool: pool(),
      adapter: openaiChat,
      attempt: async () => {
        const response = new Response(notFoundBody, { status: 404 })
        await response.text()
        throw httpError({ response })
      },
    })
    expect(outcome).toMatchObject({ kind: 'failed', status: 404 })
    expect(sink.status).toBe(404)
  })

  it('a thrown error carrying a 2xx Response is a connection failure, and that body is released', async () => {
    const cancelled: number[] = []
    let sent = 0
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: pool(),
      adapter: openaiChat,
      attempt: async () => {
        sent++
        const body = new ReadableStream({ cancel: () => void cancelled.push(sent) })
        throw httpError({ response: new Response(body, { status: 200 }) })
      },
      policy: { maxAttempts: 2, backoff: { baseMs: 1, maxMs: 2 } },
    })
    expect(outcome).toMatchObject({ kind: 'failed', status: 502 })
    expect(cancelled).toEqual([1, 2])
  })

  it('an error without a status stays a connection failure (retried, then a 502)', async () => {
    let sent = 0
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: pool(),
      adapter: openaiChat,
      attempt: async () => {
        sent++
        throw httpError({ status: 'nope' })
      },
      policy: { maxAttempts: 3, backoff: { baseMs: 1, maxMs: 2 } },
    })
    expect(sent).toBe(3)
    expect(outcome).toMatchObject({ kind: 'failed', status: 502 })
  })

  it('createResilientFetch: a fetch that throws a 404 carrying its Response gives the SDK a NotFoundError after one try', async () => {
    let sent = 0
    const fetch = createResilientFetch({
      pool: pool(),
      fetch: async () => {
        sent++
        throw httpError({ response: new Response(notFoundBody, { status: 404 }) })
      },
      policy: { maxAttempts: 3, backoff: { baseMs: 1, maxMs: 2 } },
    })
    const client = new OpenAI({
      apiKey: 'sk-x',
      baseURL: 'http://api.test/v1',
      fetch,
      maxRetries: 0,
    })
    const error = await client.chat.completions
      .create({ model: 'm-x', messages: [{ role: 'user', content: 'hi' }] })
      .catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(OpenAI.NotFoundError)
    expect(sent).toBe(1)
  })

  it.each([
    ['a thrown 400 (a status)', () => httpError({ status: 400 }), 1],
    ['a thrown connection error', () => new Error('socket hang up'), 2],
  ])('the continuation after a cut: %s is judged the same way', async (_, make, tries) => {
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    const outcomes: RelayOutcome[] = []
    let calls = 0
    const fetch = createResilientFetch({
      pool: pool(),
      fetch: async (input, init) => {
        calls++
        if (calls > 1) throw make()
        return upstream.fetch(input, init)
      },
      policy: { backoff: { baseMs: 1, maxMs: 2 }, continueAfterCut: true },
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    const client = new Anthropic({
      apiKey: 'sk-x',
      baseURL: 'http://upstream.test',
      fetch,
      maxRetries: 0,
      defaultHeaders: { 'x-fault-scenario': 's' },
    })
    await expect(
      client.messages
        .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
        .finalMessage(),
    ).rejects.toThrow(/incomplete/)
    await expect.poll(() => outcomes.length).toBe(1)
    expect(outcomes[0]).toMatchObject({ continuations: [{ result: 'failed', attempts: tries }] })
  })
})
