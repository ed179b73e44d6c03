/**
 * The request-side members of the shipped adapters (credential header, URL matching,
 * stream detection, output budget) and what a custom adapter without them gets.
 */

import { describe, expect, it } from 'vitest'
import {
  adapterForUrl,
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  fitContextWindow,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

const shipped = [openaiChat, openaiResponses, anthropicMessages, geminiGenerateContent] as const

/** A custom protocol that only knows how to read and write frames. */
const bare: StreamAdapter = {
  name: 'my-protocol',
  inspect: openaiChat.inspect,
  renderError: openaiChat.renderError,
  renderStop: openaiChat.renderStop,
  renderReasoningAsText: openaiChat.renderReasoningAsText,
}

const overflow = 'input length and `max_tokens` exceed context limit: 100000 + 50000 > 120000'
const fittedBudget = 120_000 - 100_000 - 1024

describe('credentialHeader', () => {
  it.each([
    ['openaiChat', openaiChat, 'authorization', 'Bearer sk-1'],
    ['openaiResponses', openaiResponses, 'authorization', 'Bearer sk-1'],
    ['anthropicMessages', anthropicMessages, 'x-api-key', 'sk-1'],
    ['geminiGenerateContent', geminiGenerateContent, 'x-goog-api-key', 'sk-1'],
  ])('%s puts the key in its own header', (_, adapter, name, value) => {
    expect(adapter.credentialHeader?.('sk-1')).toEqual([name, value])
  })
})

describe('adapterForUrl asks matchesUrl', () => {
  it.each([
    ['https://api.openai.com/v1/chat/completions', 'openai-chat'],
    ['https://api.openai.com/v1/chat/completions/', 'openai-chat'],
    ['https://gw.example/openai/v1/responses', 'openai-responses'],
    ['https://api.anthropic.com/v1/messages', 'anthropic-messages'],
    ['https://api.anthropic.com/v1/messages?beta=true', 'anthropic-messages'],
    [
      'https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse',
      'gemini',
    ],
    [
      'https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent',
      'gemini',
    ],
    ['https://api.openai.com/v1/embeddings', undefined],
    ['https://api.openai.com/v1/chat/completions/extra', undefined],
  ])('%s → %s', (url, name) => {
    expect(adapterForUrl(url)?.name).toBe(name)
    expect(adapterForUrl(new URL(url))?.name).toBe(name)
  })

  it('never picks an adapter without matchesUrl, and picks a custom one from a given list', () => {
    const url = 'https://llm.internal/v2/generate'
    const custom: StreamAdapter = { ...bare, matchesUrl: (u) => u.pathname === '/v2/generate' }
    expect(adapterForUrl(url)).toBeUndefined()
    expect(adapterForUrl(url, [bare])).toBeUndefined()
    expect(adapterForUrl(url, [bare, custom])).toBe(custom)
    expect(adapterForUrl('https://api.openai.com/v1/chat/completions', [custom])).toBeUndefined()
  })
})

describe('isStreamingRequest', () => {
  const chatUrl = new URL('https://api.openai.com/v1/chat/completions')
  it.each([openaiChat, openaiResponses, anthropicMessages].map((a) => [a.name, a] as const))(
    '%s streams only on "stream": true in the body',
    (_, adapter) => {
      expect(adapter.isStreamingRequest?.(chatUrl, '{"stream":true}')).toBe(true)
      expect(adapter.isStreamingRequest?.(chatUrl, '{"stream":false}')).toBe(false)
      expect(adapter.isStreamingRequest?.(chatUrl, '{"stream":"true"}')).toBe(false)
      expect(adapter.isStreamingRequest?.(chatUrl, '{"model":"m"}')).toBe(false)
      expect(adapter.isStreamingRequest?.(chatUrl, '{"stream":tru')).toBe(false)
      expect(adapter.isStreamingRequest?.(chatUrl, undefined)).toBe(false)
    },
  )

  it('gemini streams by method, whatever the body says', () => {
    const base = 'https://generativelanguage.googleapis.com/v1beta/models/g'
    const stream = new URL(`${base}:streamGenerateContent?alt=sse`)
    const plain = new URL(`${base}:generateContent`)
    expect(geminiGenerateContent.isStreamingRequest?.(stream, undefined)).toBe(true)
    expect(geminiGenerateContent.isStreamingRequest?.(plain, '{"stream":true}')).toBe(false)
  })
})

describe('fitOutputBudget through fitContextWindow', () => {
  it.each([
    [
      'openaiChat',
      openaiChat,
      { max_completion_tokens: 50_000 },
      { max_completion_tokens: fittedBudget },
    ],
    ['openaiChat', openaiChat, { max_tokens: 50_000 }, { max_tokens: fittedBudget }],
    ['openaiChat', openaiChat, {}, { max_completion_tokens: fittedBudget }],
    ['openaiResponses', openaiResponses, {}, { max_output_tokens: fittedBudget }],
    ['anthropicMessages', anthropicMessages, { max_tokens: 50_000 }, { max_tokens: fittedBudget }],
    [
      'geminiGenerateContent',
      geminiGenerateContent,
      { generationConfig: { temperature: 0, maxOutputTokens: 50_000 } },
      { generationConfig: { temperature: 0, maxOutputTokens: fittedBudget } },
    ],
  ])('%s lowers its own field', (_, adapter, body, expected) => {
    const request = { url: undefined, body }
    expect(fitContextWindow(adapter, request, overflow)?.body).toEqual(expected)
    // The old name form gives the same answer.
    expect(fitContextWindow(adapter.name, request, overflow)?.body).toEqual(expected)
  })

  it("anthropic's fit lowers the thinking budget so the answer keeps its floor", () => {
    const body = { max_tokens: 50_000, thinking: { type: 'enabled', budget_tokens: 16_000 } }
    expect(fitContextWindow(anthropicMessages, { url: undefined, body }, overflow)?.body).toEqual({
      max_tokens: fittedBudget,
      thinking: { type: 'enabled', budget_tokens: fittedBudget - 3000 },
    })
  })

  it('never lowers a budget that is already below the fit', () => {
    const request = { url: undefined, body: { max_tokens: 5000 } }
    expect(fitContextWindow(anthropicMessages, request, overflow)?.body).toEqual({
      max_tokens: 5000,
    })
  })

  it('a custom adapter without fitOutputBudget, or an unknown name, is never adjusted', () => {
    const request = { url: undefined, body: { max_tokens: 50_000 } }
    expect(fitContextWindow(bare, request, overflow)).toBeUndefined()
    expect(fitContextWindow('my-protocol', request, overflow)).toBeUndefined()
  })

  it('a custom adapter with fitOutputBudget gets the budget and the limits', () => {
    const seen: unknown[] = []
    const custom: StreamAdapter = {
      ...bare,
      fitOutputBudget: (request, budget, limits) => {
        seen.push(budget, limits)
        return { url: request.url, body: { ...request.body, limit: budget } }
      },
    }
    const fitted = fitContextWindow(custom, { url: 'u', body: {} }, overflow, { floorTokens: 2000 })
    expect(fitted).toEqual({ url: 'u', body: { limit: fittedBudget } })
    expect(seen).toEqual([fittedBudget, { floorTokens: 2000, minThinkingTokens: 1024 }])
  })
})

describe('createResilientFetch with a custom adapter', () => {
  const pool = () => createMemoryKeyPool([{ id: 'k1', secret: 'sk-custom-123456' }])

  it('refuses a pool for an adapter without credentialHeader, naming both', () => {
    expect(() => createResilientFetch({ pool: pool(), adapter: bare })).toThrow(
      new TypeError(
        'createResilientFetch: adapter "my-protocol" has no credentialHeader, so keys from pool cannot be sent; implement StreamAdapter.credentialHeader or leave out pool',
      ),
    )
    // Without a pool the caller's own credential travels as it is: nothing to place.
    expect(() => createResilientFetch({ adapter: bare })).not.toThrow()
  })

  it("sends each key in the adapter's own header, never OpenAI's", async () => {
    const upstream = createFaultyUpstream({ scenarios: { s: ['empty', 'ok'] } })
    const custom: StreamAdapter = { ...bare, credentialHeader: (key) => ['x-my-key', key] }
    const fetch = createResilientFetch({ fetch: upstream.fetch, pool: pool(), adapter: custom })
    const response = await fetch('http://upstream.test/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    })
    expect(response.status).toBe(200)
    expect(await response.text()).toContain('"content":"fox "')
    expect(upstream.requests).toHaveLength(2)
    for (const request of upstream.requests) {
      expect(request.headers['x-my-key']).toBe('sk-custom-123456')
      expect(request.headers.authorization).toBeUndefined()
    }
  })
})

describe('the faulty upstream speaks each protocol from its adapter', () => {
  it.each(shipped.map((a) => [a.name, a] as const))(
    '%s: stream detection and error types',
    async (_, adapter) => {
      const url =
        adapter === geminiGenerateContent
          ? 'http://upstream.test/v1beta/models/g:streamGenerateContent?alt=sse'
          : `http://upstream.test/v1${adapter === openaiChat ? '/chat/completions' : adapter === openaiResponses ? '/responses' : '/messages'}`
      const upstream = createFaultyUpstream({
        scenarios: { over: ['overloaded'], fit: [{ kind: 'context-overflow' }] },
      })
      const body = JSON.stringify({ stream: adapter !== geminiGenerateContent, max_tokens: 50_000 })
      const call = (scenario: string) =>
        upstream.fetch(url, { method: 'POST', headers: { 'x-fault-scenario': scenario }, body })
      const gemini = adapter === geminiGenerateContent
      const overloaded = await call('over')
      expect(overloaded.status).toBe(529)
      expect(await overloaded.text()).toContain(gemini ? 'UNAVAILABLE' : 'overloaded_error')
      const refused = await call('fit')
      expect(refused.status).toBe(400)
      expect(await refused.text()).toContain(gemini ? 'INVALID_ARGUMENT' : 'invalid_request_error')
      const ok = await call('default')
      expect(ok.headers.get('content-type')).toContain('text/event-stream')
      expect(upstream.requests.map((r) => r.protocol)).toEqual([
        adapter.name,
        adapter.name,
        adapter.name,
      ])
    },
  )
})
