import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  adapterForUrl,
  createHedging,
  createMemoryKeyPool,
  createResilientFetch,
  type RelayOutcome,
} from '../../src/index.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

const answer = 'The quick brown fox jumps over the lazy dog.'

function clients(scenario: Scenario, options: Parameters<typeof createResilientFetch>[0] = {}) {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const outcomes: RelayOutcome[] = []
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    onOutcome: (o) => outcomes.push(o),
    ...options,
  })
  const headers = { 'x-fault-scenario': 's' }
  const openai = new OpenAI({
    apiKey: 'sk-test-openai-123456',
    baseURL: 'http://upstream.test/v1',
    fetch,
    maxRetries: 0,
    defaultHeaders: headers,
  })
  const anthropic = new Anthropic({
    apiKey: 'sk-ant-test-123456',
    baseURL: 'http://upstream.test',
    fetch,
    maxRetries: 0,
    defaultHeaders: headers,
  })
  return { upstream, openai, anthropic, outcomes }
}

async function chatText(openai: OpenAI): Promise<string> {
  const stream = await openai.chat.completions.create({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
  })
  let text = ''
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
  return text
}

describe('createResilientFetch inside the official SDKs', () => {
  let close: (() => Promise<void>) | undefined
  afterEach(async () => {
    await close?.()
  })

  it('new OpenAI({ fetch }): a first-attempt empty stream is invisible to the caller', async () => {
    const { openai, upstream, outcomes } = clients(['empty', 'ok'])
    close = upstream.close
    expect(await chatText(openai)).toBe(answer)
    expect(upstream.requests.map((r) => r.fault)).toEqual(['empty', 'ok'])
    await vi.waitFor(() => expect(outcomes[0]).toMatchObject({ kind: 'committed' }))
  })

  it('an app with one key hedges a stalled first attempt on its own credential (sameKey), on the first request', async () => {
    const { openai, upstream, outcomes } = clients(['role-only-then-stall', 'ok'], {
      policy: { hedge: createHedging({ afterMs: 200, sameKey: true }) },
    })
    close = upstream.close
    expect(await chatText(openai)).toBe(answer)
    expect(upstream.requests.map((r) => r.fault)).toEqual(['role-only-then-stall', 'ok'])
    await vi.waitFor(() => expect(outcomes[0]).toMatchObject({ kind: 'committed' }))
    expect(outcomes[0]?.kind === 'committed' && outcomes[0].hedges).toMatchObject({
      started: 1,
      wonByHedge: true,
    })
  })

  it('new Anthropic({ fetch }): a keep-alive-only first attempt is invisible with a first-output timeout', async () => {
    const { anthropic, upstream } = clients(['keepalives-only', 'ok'], {
      policy: { peek: { firstOutputTimeoutMs: 300 } },
    })
    close = upstream.close
    const message = await anthropic.messages
      .stream({ model: 'claude-test', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    expect(
      message.content.map((block) => (block.type === 'text' ? block.text : block.type)),
    ).toEqual([answer])
    expect(message.stop_reason).toBe('end_turn')
    expect(upstream.requests).toHaveLength(2)
  })

  it('the same buffered body is sent on every attempt, with the pool key in the credential header', async () => {
    const pool = createMemoryKeyPool([
      { id: 'a', secret: 'sk-pool-a-1234567890' },
      { id: 'b', secret: 'sk-pool-b-1234567890' },
    ])
    const seen: string[] = []
    const upstream = createFaultyUpstream({ scenarios: { s: ['error-frame', 'ok'] } })
    close = upstream.close
    const fetch = createResilientFetch({
      pool,
      fetch: (input, init) => {
        seen.push(new Headers(init?.headers).get('authorization') ?? '')
        return upstream.fetch(input, init)
      },
    })
    const openai = new OpenAI({
      apiKey: 'sk-sdk-own',
      baseURL: 'http://upstream.test/v1',
      fetch,
      maxRetries: 0,
      defaultHeaders: { 'x-fault-scenario': 's' },
    })
    expect(await chatText(openai)).toBe(answer)
    expect(seen).toEqual(['Bearer sk-pool-a-1234567890', 'Bearer sk-pool-b-1234567890'])
    const [first, second] = upstream.requests
    expect(first?.body).toBe(second?.body)
    expect(JSON.parse(first?.body ?? '{}')).toMatchObject({ stream: true })
    expect(first?.headers.authorization).toBe('[redacted]')
  })

  it('after commit, a cut stream reaches the SDK as an honest error, never a fake success', async () => {
    const { openai, upstream } = clients(['partial-then-cut', 'ok'])
    close = upstream.close
    await expect(chatText(openai)).rejects.toThrow(/ended before its final event/)
    expect(upstream.requests).toHaveLength(1)
  })

  it('when every attempt fails before commit the SDK gets the status and the message', async () => {
    const { openai, upstream } = clients(['html-500'], {
      policy: { maxAttempts: 2, backoff: { baseMs: 1 } },
    })
    close = upstream.close
    const error = await chatText(openai).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.APIError)
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
    expect((error as Error).message).toContain('500 Internal Server Error')
  })

  it('retries non-streaming requests on the same rules and returns the upstream answer as given', async () => {
    const upstream = createFaultyUpstream({
      scenarios: { s: [{ kind: 'rate-limited', retryAfterMs: 10 }, 'ok'] },
    })
    close = upstream.close
    const fetch = createResilientFetch({ fetch: upstream.fetch })
    const response = await fetch('http://upstream.test/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
      body: JSON.stringify({ model: 'm', messages: [] }),
    })
    expect(response.status).toBe(200)
    expect(upstream.requests.map((r) => r.fault)).toEqual(['rate-limited', 'ok'])
  })

  it('picks the adapter from the request URL', () => {
    expect(adapterForUrl('https://api.openai.com/v1/chat/completions')?.name).toBe('openai-chat')
    expect(adapterForUrl('https://api.openai.com/v1/responses')?.name).toBe('openai-responses')
    expect(adapterForUrl('https://api.anthropic.com/v1/messages')?.name).toBe('anthropic-messages')
    expect(
      adapterForUrl(
        'https://g.example/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse',
      )?.name,
    ).toBe('gemini')
    expect(adapterForUrl('https://api.openai.com/v1/embeddings')).toBeUndefined()
  })
})
