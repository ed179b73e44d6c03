import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import {
  createSimulatedFleet,
  type SimulatedFleet,
  type SimulatedFleetOptions,
} from '../../src/testing/index.js'

let fleet: SimulatedFleet | undefined
afterEach(async () => {
  await fleet?.close()
  fleet = undefined
})

async function start(options: SimulatedFleetOptions): Promise<string> {
  fleet = createSimulatedFleet(options)
  return fleet.listen()
}

const chatBody = (maxTokens = 10, stream = true) =>
  JSON.stringify({
    model: 'm',
    stream,
    max_tokens: maxTokens,
    messages: [{ role: 'user', content: 'hi' }],
  })

function chat(base: string, secret: string, body = chatBody()): Promise<Response> {
  return fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body,
  })
}

/** The rate-limit headers of a response, by name. */
function limitHeaders(response: Response): Record<string, string> {
  return Object.fromEntries(
    [...response.headers].filter(([name]) => /ratelimit|retry-after/.test(name)),
  )
}

// A minute-long window: nothing refills noticeably while a test runs.
const minute = 60_000

describe('createSimulatedFleet', () => {
  it('honest: a key serves its request bucket, counts down remaining, then answers 429 saying when one request fits', async () => {
    const base = await start({
      windowMs: minute,
      keys: [{ id: 'a', secret: 'sk-a', requestsPerWindow: 3 }],
    })
    const remaining: string[] = []
    for (let i = 0; i < 3; i++) {
      const response = await chat(base, 'sk-a')
      expect(response.status).toBe(200)
      remaining.push(response.headers.get('x-ratelimit-remaining-requests') ?? '')
      expect(response.headers.get('x-ratelimit-limit-requests')).toBe('3')
      expect(response.headers.get('x-ratelimit-reset-requests')).toMatch(/^(\d+ms|\d+(\.\d+)?s)$/)
      expect(await response.text()).toContain('data: [DONE]')
    }
    expect(remaining).toEqual(['2', '1', '0'])
    const limited = await chat(base, 'sk-a')
    expect(limited.status).toBe(429)
    expect(JSON.parse(await limited.text())).toMatchObject({ error: { type: 'rate_limit_error' } })
    // One request refills in a third of the window: 20 s.
    const retryAfterMs = Number(limited.headers.get('retry-after-ms'))
    expect(retryAfterMs).toBeGreaterThan(19_000)
    expect(retryAfterMs).toBeLessThanOrEqual(20_000)
    expect(limited.headers.get('retry-after')).toBe('20')
    expect(limited.headers.get('x-ratelimit-remaining-requests')).toBe('0')
    expect(fleet?.stats()).toEqual({ a: { requests: 4, rateLimited: 1, served: 3 } })
  })

  it('honest: the token bucket refuses a request whose input and stated output budget do not fit, while requests remain', async () => {
    const body = chatBody(400)
    const cost = Math.ceil(body.length / 4) + 400
    const small = Math.ceil(chatBody(0).length / 4)
    const base = await start({
      // An hour: not even one token refills while the test runs.
      windowMs: 3_600_000,
      keys: [
        { id: 'a', secret: 'sk-a', requestsPerWindow: 100, tokensPerWindow: cost * 2 + small },
      ],
    })
    const first = await chat(base, 'sk-a', body)
    expect(first.status).toBe(200)
    expect(first.headers.get('x-ratelimit-remaining-tokens')).toBe(String(cost + small))
    await first.text()
    expect((await chat(base, 'sk-a', body)).status).toBe(200)
    const limited = await chat(base, 'sk-a', body)
    expect(limited.status).toBe(429)
    expect(limited.headers.get('x-ratelimit-remaining-requests')).toBe('98')
    expect(limited.headers.get('x-ratelimit-remaining-tokens')).toBe(String(small))
    // A small request still fits.
    expect((await chat(base, 'sk-a', chatBody(0))).status).toBe(200)
    expect(fleet?.stats().a).toEqual({ requests: 4, rateLimited: 1, served: 3 })
  })

  it('keys are told apart by their credential and count separately; an unknown credential is answered 401', async () => {
    const base = await start({
      windowMs: minute,
      keys: [
        { id: 'small', secret: 'sk-small', requestsPerWindow: 1 },
        { id: 'big', secret: 'sk-big', requestsPerWindow: 10 },
      ],
    })
    expect((await chat(base, 'sk-small')).status).toBe(200)
    expect((await chat(base, 'sk-small')).status).toBe(429)
    for (let i = 0; i < 3; i++) expect((await chat(base, 'sk-big')).status).toBe(200)
    const unknown = await chat(base, 'sk-nobody')
    expect(unknown.status).toBe(401)
    expect(await unknown.text()).not.toContain('sk-nobody')
    expect(fleet?.stats()).toEqual({
      small: { requests: 2, rateLimited: 1, served: 1 },
      big: { requests: 3, rateLimited: 0, served: 3 },
    })
    expect(fleet?.unknownCredentials).toBe(1)
    fleet?.reset()
    expect((await chat(base, 'sk-small')).status).toBe(200)
    expect(fleet?.stats().small).toEqual({ requests: 1, rateLimited: 0, served: 1 })
    expect(fleet?.unknownCredentials).toBe(0)
  })

  it('none: no rate-limit header on any answer, and a bare 429', async () => {
    const base = await start({
      windowMs: minute,
      keys: [
        { id: 'a', secret: 'sk-a', requestsPerWindow: 1, tokensPerWindow: 1000, headers: 'none' },
      ],
    })
    const ok = await chat(base, 'sk-a')
    expect(ok.status).toBe(200)
    expect(limitHeaders(ok)).toEqual({})
    const limited = await chat(base, 'sk-a')
    expect(limited.status).toBe(429)
    expect(limitHeaders(limited)).toEqual({})
  })

  it('lying: every answer says the key is full and resets at once, and a 429 has no retry-after', async () => {
    const base = await start({
      windowMs: minute,
      keys: [
        { id: 'a', secret: 'sk-a', requestsPerWindow: 2, tokensPerWindow: 1000, headers: 'lying' },
      ],
    })
    for (let i = 0; i < 2; i++) {
      const ok = await chat(base, 'sk-a')
      expect(ok.status).toBe(200)
      expect(ok.headers.get('x-ratelimit-remaining-requests')).toBe('2')
      expect(ok.headers.get('x-ratelimit-reset-requests')).toBe('0ms')
    }
    const limited = await chat(base, 'sk-a')
    expect(limited.status).toBe(429)
    expect(limitHeaders(limited)).toEqual({
      'x-ratelimit-limit-requests': '2',
      'x-ratelimit-remaining-requests': '2',
      'x-ratelimit-reset-requests': '0ms',
      'x-ratelimit-limit-tokens': '1000',
      'x-ratelimit-remaining-tokens': '1000',
      'x-ratelimit-reset-tokens': '0ms',
    })
  })

  it('the official OpenAI client streams a whole answer from a key, and its raw response carries the headroom', async () => {
    const base = await start({
      windowMs: minute,
      text: 'Hello from the fleet.',
      keys: [{ id: 'a', secret: 'sk-a', requestsPerWindow: 5, firstTokenMs: 30 }],
    })
    const client = new OpenAI({ apiKey: 'sk-a', baseURL: `${base}/v1`, maxRetries: 0 })
    const started = performance.now()
    const { data: stream, response } = await client.chat.completions
      .create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse()
    expect(response.headers.get('x-ratelimit-remaining-requests')).toBe('4')
    let text = ''
    let firstTokenAfter: number | undefined
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta.content ?? ''
      if (delta !== '' && firstTokenAfter === undefined)
        firstTokenAfter = performance.now() - started
      text += delta
    }
    expect(text).toBe('Hello from the fleet.')
    // The first token waits for the key's latency (a lower bound only).
    expect(firstTokenAfter).toBeGreaterThanOrEqual(29)
  })

  it('honest on Anthropic Messages: anthropic-ratelimit-* headers with RFC 3339 resets, a whole answer for the official client, and retry-after in seconds on a 429', async () => {
    const base = await start({
      windowMs: minute,
      text: 'Hi there.',
      keys: [{ id: 'a', secret: 'sk-ant-a', requestsPerWindow: 1, tokensPerWindow: 5000 }],
    })
    const client = new Anthropic({ apiKey: 'sk-ant-a', baseURL: base, maxRetries: 0 })
    const { data: stream, response } = await client.messages
      .create({
        model: 'claude',
        max_tokens: 100,
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      })
      .withResponse()
    expect(response.headers.get('anthropic-ratelimit-requests-limit')).toBe('1')
    expect(response.headers.get('anthropic-ratelimit-requests-remaining')).toBe('0')
    const reset = Date.parse(response.headers.get('anthropic-ratelimit-requests-reset') ?? '')
    expect(reset - Date.now()).toBeGreaterThan(50_000)
    expect(Number(response.headers.get('anthropic-ratelimit-tokens-remaining'))).toBeLessThan(4900)
    expect(response.headers.get('x-ratelimit-remaining-requests')).toBeNull()
    let text = ''
    for await (const event of stream) {
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta')
        text += event.delta.text
    }
    expect(text).toBe('Hi there.')
    const limited = await fetch(`${base}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': 'sk-ant-a', 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'claude', max_tokens: 10, stream: true, messages: [] }),
    })
    expect(limited.status).toBe(429)
    expect(JSON.parse(await limited.text())).toMatchObject({
      type: 'error',
      error: { type: 'rate_limit_error' },
    })
    expect(limited.headers.get('retry-after')).toBe('60')
    expect(limited.headers.get('retry-after-ms')).toBeNull()
  })

  it('a bucket refills over the window: a refused key serves again once the window has passed', async () => {
    const base = await start({
      windowMs: 100,
      keys: [{ id: 'a', secret: 'sk-a', requestsPerWindow: 1 }],
    })
    expect((await chat(base, 'sk-a')).status).toBe(200)
    const limited = await chat(base, 'sk-a')
    expect(limited.status).toBe(429)
    const waitMs = Number(limited.headers.get('retry-after-ms'))
    expect(waitMs).toBeLessThanOrEqual(100)
    await new Promise((resolve) => setTimeout(resolve, waitMs + 20))
    expect((await chat(base, 'sk-a')).status).toBe(200)
  })

  it('a 429 takes rateLimitedMs (a lower bound), and non-streaming requests get the whole answer as JSON', async () => {
    const base = await start({
      windowMs: minute,
      rateLimitedMs: 40,
      text: 'Plain.',
      keys: [{ id: 'a', secret: 'sk-a', requestsPerWindow: 1 }],
    })
    const ok = await chat(base, 'sk-a', chatBody(10, false))
    expect(ok.status).toBe(200)
    expect(JSON.parse(await ok.text())).toMatchObject({
      choices: [{ message: { content: 'Plain.' } }],
    })
    const started = performance.now()
    expect((await chat(base, 'sk-a')).status).toBe(429)
    expect(performance.now() - started).toBeGreaterThanOrEqual(39)
  })

  it('close() ends streams still waiting for their first token', async () => {
    const base = await start({
      windowMs: minute,
      keys: [{ id: 'a', secret: 'sk-a', firstTokenMs: 60_000 }],
    })
    const response = await chat(base, 'sk-a')
    expect(response.status).toBe(200)
    const body = response.text().catch(() => 'failed')
    await fleet?.close()
    fleet = undefined
    expect(await body).not.toContain('[DONE]')
  })

  it('rejects bad options with messages that name the field', () => {
    const key = { id: 'a', secret: 'sk-a' }
    expect(() => createSimulatedFleet({ keys: [] })).toThrow(
      'createSimulatedFleet: keys must be a non-empty array',
    )
    expect(() => createSimulatedFleet({ keys: [key, { id: 'a', secret: 'sk-b' }] })).toThrow(
      'createSimulatedFleet: keys[1].id must be a unique non-empty string',
    )
    expect(() => createSimulatedFleet({ keys: [key, { id: 'b', secret: 'sk-a' }] })).toThrow(
      'createSimulatedFleet: keys[1].secret must be a unique non-empty string',
    )
    expect(() => createSimulatedFleet({ keys: [{ ...key, requestsPerWindow: 0 }] })).toThrow(
      'createSimulatedFleet: keys[0].requestsPerWindow must be a number > 0 or Infinity, got 0',
    )
    expect(() => createSimulatedFleet({ keys: [{ ...key, headers: 'loud' as 'none' }] })).toThrow(
      "createSimulatedFleet: keys[0].headers must be 'honest', 'none' or 'lying', got loud",
    )
    expect(() => createSimulatedFleet({ keys: [key], windowMs: 0 })).toThrow(
      'createSimulatedFleet: windowMs must be a finite number >= 1, got 0',
    )
    expect(() => createSimulatedFleet({ keys: [key], rateLimitedMs: -1 })).toThrow(
      'createSimulatedFleet: rateLimitedMs must be a finite number >= 0, got -1',
    )
    expect(() =>
      createSimulatedFleet({ keys: [key], windowMS: 5 } as unknown as SimulatedFleetOptions),
    ).toThrow('createSimulatedFleet: unknown option "windowMS"')
  })
})
