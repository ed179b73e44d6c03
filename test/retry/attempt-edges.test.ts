import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import {
  type AttemptContext,
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  openaiChat,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { scriptedUpstream } from '../support/upstream.js'

const keys = (...ids: string[]) => ids.map((id) => ({ id, secret: `sk-secret-${id}-0123456789` }))

let server: Server | undefined
afterEach(async () => {
  server?.closeAllConnections()
  await new Promise<void>((resolve) =>
    server === undefined ? resolve() : server.close(() => resolve()),
  )
  server = undefined
})

async function listen(handler: Parameters<typeof createServer>[1]): Promise<string> {
  server = createServer(handler)
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

describe('an upstream that never sends its response headers', () => {
  it('ends at the first-byte bound (it covers connect and headers), not at the deadline', async () => {
    let requests = 0
    const url = await listen((req) => {
      requests++
      req.resume() // accept the request, never answer
    })
    const started = performance.now()
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: ({ signal }) => fetch(url, { method: 'POST', body: '{}', signal }),
      policy: { maxAttempts: 1, peek: { firstByteTimeoutMs: 300 } },
    })
    const elapsed = performance.now() - started
    expect(requests).toBe(1)
    expect(outcome).toMatchObject({ kind: 'failed', status: 504, reason: 'first-byte-timeout' })
    expect(elapsed).toBeGreaterThanOrEqual(290)
    expect(elapsed).toBeLessThan(5_000)
  })
})

describe('the one timeout a user sets bounds the whole pre-output phase', () => {
  it.each([
    ['a stream', true],
    ['a non-streaming request', false],
  ] as const)('%s: firstOutputTimeoutMs alone ends a hang before headers', async (_, stream) => {
    let requests = 0
    const url = await listen((req) => {
      requests++
      req.resume() // accept the request, never answer
    })
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      stream,
      attempt: ({ signal }) => fetch(url, { method: 'POST', body: '{}', signal }),
      // The first-byte bound is the default (30 s): only the first-output bound can end it.
      policy: { maxAttempts: 1, peek: { firstOutputTimeoutMs: 300 } },
    })
    expect(requests).toBe(1)
    expect(outcome).toMatchObject({ kind: 'failed', status: 504, reason: 'first-output-timeout' })
    expect(outcome.durationMs).toBeLessThan(5_000)
  })
})

describe('an upstream that ignored stream: true and sent the whole answer as JSON', () => {
  const cases: [string, StreamAdapter, unknown, string][] = [
    [
      'OpenAI Chat',
      openaiChat,
      {
        id: 'chatcmpl-1',
        object: 'chat.completion',
        model: 'm',
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: 'Hello there' },
            finish_reason: 'stop',
          },
        ],
      },
      'Hello there',
    ],
    [
      'Anthropic Messages',
      anthropicMessages,
      {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: 'm',
        content: [{ type: 'text', text: 'Hello there' }],
        stop_reason: 'end_turn',
        usage: { input_tokens: 3, output_tokens: 2 },
      },
      'Hello there',
    ],
  ]
  it.each(cases)(
    '%s: served as the protocol stream, committed on the first attempt, the key credited',
    async (_name, adapter, message, text) => {
      const upstream = scriptedUpstream([
        {
          headers: { 'content-type': 'application/json' },
          steps: [{ bytes: JSON.stringify(message) }],
        },
      ])
      const sink = createRecordingSink()
      const pool = createMemoryKeyPool(keys('a'))
      const outcome = await relay({ sink, pool, adapter, attempt: upstream.attempt })
      expect(outcome).toMatchObject({ kind: 'committed', eof: { kind: 'completed' } })
      expect(upstream.calls).toHaveLength(1)
      expect(sink.text).toContain(text)
      expect(sink.events[0]).toMatchObject({ type: 'head', status: 200 })
      expect((await pool.stats())[0]?.outcomes.success).toBe(1)
    },
  )
})

describe('a stale pooled connection', () => {
  it('after a reset before any response, the next attempt is told to use a fresh connection; after other failures it is not', async () => {
    const seen: boolean[] = []
    const reset = Object.assign(new TypeError('fetch failed'), {
      cause: Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }),
    })
    const upstream = scriptedUpstream([{ throws: reset }, { status: 503 }, { status: 503 }, {}])
    await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a', 'b', 'c', 'd')),
      adapter: openaiChat,
      attempt: (context: AttemptContext) => {
        seen.push(context.freshConnection)
        return upstream.attempt(context)
      },
      policy: { maxAttempts: 4, backoff: { baseMs: 1 } },
    })
    expect(seen).toEqual([false, true, false, false])
  })

  it('createResilientFetch sends that attempt through a one-off dispatcher (Node), so no pooled socket is reused', async () => {
    const inits: RequestInit[] = []
    let calls = 0
    const fetch = createResilientFetch({
      policy: { backoff: { baseMs: 1 } },
      fetch: async (_input, init) => {
        inits.push(init ?? {})
        if (calls++ === 0) {
          throw Object.assign(new TypeError('fetch failed'), {
            cause: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
          })
        }
        return new Response(
          'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
          { headers: { 'content-type': 'text/event-stream' } },
        )
      },
    })
    const response = await fetch('http://upstream.test/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    })
    expect(await response.text()).toContain('"hi"')
    expect(inits).toHaveLength(2)
    expect('dispatcher' in (inits[0] as object)).toBe(false)
    expect((inits[1] as { dispatcher?: unknown }).dispatcher).toBeDefined()
  })
})
