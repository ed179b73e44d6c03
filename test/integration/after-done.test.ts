import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { startTranslatingGateway } from '../../examples/anthropic-over-openai-gateway.js'
import {
  createResilientFetch,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
} from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { type ChatScript, chunk, done, startChatUpstream } from '../support/chat-upstream.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * Bytes after `data: [DONE]`. The `openai` SDK yields nothing after `[DONE]` but reads the body
 * to its end, so an upstream that holds its connection open after `[DONE]` (or sends more)
 * would keep the client's stream open, and a translator fed those frames would write them
 * after the client's final event. The relay ends the client's stream at `[DONE]`: it writes
 * nothing after it, closes at once and releases the upstream body. Each twin: `relay()` behind
 * node:http, `createResilientFetch` as the SDK's fetch, and translated to Anthropic clients.
 */

const { listen } = useLoopback()
const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

const policy: RelayPolicy = {
  maxAttempts: 2,
  backoff: { baseMs: 5, maxMs: 20 },
  peek: { firstByteTimeoutMs: 2_000, firstOutputTimeoutMs: 2_000 },
}

const answer = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Hello' }),
  chunk({ content: ', world' }),
  chunk({}, 'stop'),
  done,
]
/** What an upstream sends after `[DONE]`: more text, and error frames that quote a key. */
const after = [
  chunk({ content: ' and more after the end' }),
  'data: {"error":{"type":"server_error","message":"after the end"}}\n\n',
  'data: {"error":"after the end"}\n\n',
]

/** In one write (the frames after `[DONE]` in the same chunk), or one frame per write. */
const shapes: readonly [string, ChatScript][] = [
  ['in one chunk', { frames: [answer.join('') + after.join('')], end: 'hold' }],
  ['frame by frame', { frames: [...answer, ...after], gapMs: 15, end: 'hold' }],
]

/** Whether `read` settles within `ms`: the client's stream ended without the upstream's EOF. */
async function within<T>(ms: number, read: Promise<T>): Promise<T | 'still open'> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const open = new Promise<'still open'>((resolve) => {
    timer = setTimeout(() => resolve('still open'), ms)
  })
  try {
    return await Promise.race([read, open])
  } finally {
    clearTimeout(timer)
  }
}

async function chatText(client: OpenAI): Promise<string> {
  const stream = await client.chat.completions.create({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
  })
  let text = ''
  for await (const part of stream) text += part.choices[0]?.delta?.content ?? ''
  return text
}

async function relayGateway(upstreamUrl: string) {
  const outcomes: RelayOutcome[] = []
  const gateway = createServer((req, res) => {
    withBody(req, (body) => {
      void relay({
        sink: nodeSink(res),
        adapter: openaiChat,
        policy,
        request: { url: `${upstreamUrl}/v1/chat/completions`, body: JSON.parse(body) },
        attempt: ({ signal, request }) =>
          fetch(request?.url ?? '', {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(request?.body),
            signal,
          }),
      }).then((outcome) => outcomes.push(outcome))
    })
  })
  return { url: await listen(gateway), outcomes }
}

function expectCompleted(outcomes: readonly RelayOutcome[]): void {
  expect(outcomes).toHaveLength(1)
  expect(outcomes[0]).toMatchObject({
    kind: 'committed',
    end: { kind: 'completed' },
    eof: { kind: 'completed' },
  })
}

describe.each(shapes)('bytes after [DONE] (%s)', (_, script) => {
  it('relay() behind node:http: the SDK stream ends at [DONE], nothing after it is written, the upstream is released', async () => {
    const upstream = await startChatUpstream([script])
    cleanups.push(upstream.close)
    const gateway = await relayGateway(upstream.url)
    const client = new OpenAI({ apiKey: 'x', baseURL: `${gateway.url}/v1`, maxRetries: 0 })
    expect(await within(2_000, chatText(client))).toBe('Hello, world')
    const raw = await within(
      2_000,
      fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [], stream: true }),
      }).then((response) => response.text()),
    )
    expect(raw).toBe(answer.join(''))
    await expect.poll(() => gateway.outcomes.length).toBe(2)
    expectCompleted(gateway.outcomes.slice(0, 1))
    // Both upstream answers were held open after [DONE]: the relay let each go.
    await expect.poll(() => upstream.closedAt.length).toBe(2)
  })

  it('createResilientFetch as the SDK fetch: the stream ends at [DONE], the upstream is released', async () => {
    const upstream = await startChatUpstream([script])
    cleanups.push(upstream.close)
    const outcomes: RelayOutcome[] = []
    const client = new OpenAI({
      apiKey: 'x',
      baseURL: `${upstream.url}/v1`,
      maxRetries: 0,
      fetch: createResilientFetch({ policy, onOutcome: (outcome) => outcomes.push(outcome) }),
    })
    expect(await within(2_000, chatText(client))).toBe('Hello, world')
    await expect.poll(() => outcomes.length).toBe(1)
    expectCompleted(outcomes)
    await expect.poll(() => upstream.closedAt.length).toBe(1)
  })

  it.each(['frames', 'per-frame'] as const)(
    'translated to an Anthropic client (%s translator): the whole answer, no error after it, ended at once',
    async (translator) => {
      const upstream = await startChatUpstream([script])
      cleanups.push(upstream.close)
      const outcomes: RelayOutcome[] = []
      const gateway = await startTranslatingGateway({
        upstreamUrl: `${upstream.url}/v1`,
        upstreamApiKey: 'sk-upstream-secret',
        model: 'gpt-test',
        policy,
        translator,
        onOutcome: (outcome) => outcomes.push(outcome),
      })
      cleanups.push(gateway.close)
      const client = new Anthropic({ baseURL: gateway.url, apiKey: 'k', maxRetries: 0 })
      const read = async () => {
        const stream = await client.messages.create({
          model: 'claude-test',
          max_tokens: 64,
          messages: [{ role: 'user', content: 'Hi' }],
          stream: true,
        })
        let text = ''
        for await (const event of stream) {
          if (event.type === 'content_block_delta' && event.delta.type === 'text_delta')
            text += event.delta.text
        }
        return text
      }
      expect(await within(2_000, read())).toBe('Hello, world')
      await expect.poll(() => outcomes.length).toBe(1)
      expectCompleted(outcomes)
      await expect.poll(() => upstream.closedAt.length).toBe(1)
    },
  )
})

/** An upstream that ends its body 30 ms after `[DONE]`, counting the connections it was opened. */
async function lingeringUpstream() {
  let connections = 0
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(answer.join(''))
      setTimeout(() => res.end(), 30)
    })
  })
  server.on('connection', () => connections++)
  const url = await listen(server)
  return { url, connections: () => connections }
}

describe('an upstream that ends right after [DONE]', () => {
  it.each([
    ['relay() behind node:http', 'relay'],
    ['createResilientFetch', 'fetch'],
  ] as const)('%s: its body is read to its end, so its connection is reused', async (_, twin) => {
    const upstream = await lingeringUpstream()
    const outcomes: RelayOutcome[] = []
    const gateway = twin === 'relay' ? await relayGateway(upstream.url) : undefined
    const client = new OpenAI({
      apiKey: 'x',
      baseURL: `${gateway?.url ?? upstream.url}/v1`,
      maxRetries: 0,
      ...(gateway === undefined
        ? { fetch: createResilientFetch({ policy, onOutcome: (each) => outcomes.push(each) }) }
        : {}),
    })
    for (let i = 0; i < 3; i++) {
      await expect(chatText(client)).resolves.toBe('Hello, world')
      // The client is done at [DONE]; the upstream's body ends 30 ms later.
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    const seen = gateway?.outcomes ?? outcomes
    await expect.poll(() => seen.length).toBe(3)
    for (const outcome of seen) expectCompleted([outcome])
    expect(upstream.connections()).toBe(1)
  })
})
