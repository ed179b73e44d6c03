/**
 * The ready attempts, `fetchAttempt` and its `node:http` twin `nodeHttpAttempt`, through
 * `relay()` against a real upstream on 127.0.0.1 that records what it received: each attempt
 * sends its own `context.request` (an adjusted request, a fallback route's), the adapter's
 * credential header for the leased key, the protocol's required headers, only the allowlisted
 * client headers, and never follows a redirect.
 */

import { createServer, type IncomingHttpHeaders } from 'node:http'
import {
  anthropicMessages,
  createMemoryKeyPool,
  fetchAttempt,
  geminiGenerateContent,
  openaiChat,
  relay,
  type StreamAdapter,
} from 'stream-boundary'
import type { ReadyAttempt, ReadyAttemptOptions } from 'stream-boundary/advanced'
import { nodeHttpAttempt } from 'stream-boundary/node'
import { createFaultyUpstream, createRecordingSink } from 'stream-boundary/testing'
import { describe, expect, it } from 'vitest'
import { useLoopback, withBody } from '../support/loopback.js'

const loopback = useLoopback()

interface Received {
  readonly url: string
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

/** An upstream that answers every request with `answer(n)` and records what it got. */
async function recordingUpstream(
  answer: (n: number) => { status: number; headers: Record<string, string>; body: string },
) {
  const received: Received[] = []
  const server = createServer((req, res) => {
    withBody(req, (body) => {
      received.push({ url: req.url ?? '', headers: req.headers, body })
      const { status, headers, body: out } = answer(received.length)
      res.writeHead(status, headers).end(out)
    })
  })
  const url = await loopback.listen(server)
  return { url, received }
}

const chatAnswer = [
  'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n',
  'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
  'data: [DONE]\n\n',
].join('')
const sse = { 'content-type': 'text/event-stream' }

const twins: readonly [string, (options?: ReadyAttemptOptions) => ReadyAttempt][] = [
  ['fetchAttempt', fetchAttempt],
  ['nodeHttpAttempt', nodeHttpAttempt],
]

describe.each(twins)('%s', (_name, make) => {
  it("sends the attempt's own request: the relay's adjusted body, not the client's", async () => {
    const refusal = JSON.stringify({
      error: { type: 'invalid_request_error', message: 'too long' },
    })
    const upstream = await recordingUpstream((n) =>
      n === 1
        ? { status: 400, headers: { 'content-type': 'application/json' }, body: refusal }
        : { status: 200, headers: sse, body: chatAnswer },
    )
    const body = { model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'hé ✓' }] }
    const outcome = await relay({
      sink: createRecordingSink(),
      adapter: openaiChat,
      pool: createMemoryKeyPool([{ id: 'k', secret: 'sk-test-1' }]),
      request: { url: `${upstream.url}/v1/chat/completions`, body },
      policy: { adjustRequest: ({ request }) => ({ ...request.body, max_tokens: 7 }) },
      attempt: make(),
    })
    expect(outcome.kind).toBe('committed')
    expect(upstream.received).toHaveLength(2)
    expect(JSON.parse(upstream.received[0]?.body ?? '')).toEqual(body)
    expect(JSON.parse(upstream.received[1]?.body ?? '')).toEqual({ ...body, max_tokens: 7 })
    expect(upstream.received[1]?.url).toBe('/v1/chat/completions')
    expect(upstream.received[1]?.headers.authorization).toBe('Bearer sk-test-1')
    expect(upstream.received[1]?.headers['content-type']).toBe('application/json')
  })

  it('sends each protocol its own credential header and required headers', async () => {
    const cases: [StreamAdapter, string, Record<string, string>][] = [
      [openaiChat, '/v1/chat/completions', { authorization: 'Bearer sk-a' }],
      [
        anthropicMessages,
        '/v1/messages',
        { 'x-api-key': 'sk-a', 'anthropic-version': '2023-06-01' },
      ],
      [
        geminiGenerateContent,
        '/v1beta/models/g:streamGenerateContent?alt=sse',
        { 'x-goog-api-key': 'sk-a' },
      ],
    ]
    for (const [adapter, path, expected] of cases) {
      const upstream = await recordingUpstream(() => ({ status: 500, headers: {}, body: '{}' }))
      await relay({
        sink: createRecordingSink(),
        adapter,
        pool: createMemoryKeyPool([{ id: 'k', secret: 'sk-a' }]),
        request: { url: `${upstream.url}${path}`, body: { model: 'm', stream: true } },
        policy: { maxAttempts: 1 },
        attempt: make(),
      })
      expect(upstream.received.length, adapter.name).toBe(1)
      for (const [name, value] of Object.entries(expected))
        expect(upstream.received[0]?.headers[name], `${adapter.name} ${name}`).toBe(value)
    }
  })

  it("forwards only the allowlisted client headers, never the client's credential or a hop-by-hop one", async () => {
    const upstream = await recordingUpstream(() => ({
      status: 200,
      headers: sse,
      body: chatAnswer,
    }))
    const clientHeaders = {
      authorization: 'Bearer client-own-key',
      cookie: 'session=1',
      'anthropic-beta': 'tools-2024',
      'openai-beta': 'assistants=v2',
      'x-client-request-id': 'client-rid',
      'x-other': 'no',
      connection: 'keep-alive, openai-beta',
    }
    await relay({
      sink: createRecordingSink(),
      adapter: openaiChat,
      pool: createMemoryKeyPool([{ id: 'k', secret: 'sk-pool' }]),
      request: { url: `${upstream.url}/v1/chat/completions`, body: { model: 'm', stream: true } },
      attempt: make({ clientHeaders }),
    })
    const headers = upstream.received[0]?.headers ?? {}
    expect(headers.authorization).toBe('Bearer sk-pool')
    expect(headers.cookie).toBeUndefined()
    expect(headers['x-other']).toBeUndefined()
    expect(headers['openai-beta']).toBeUndefined() // named in the client's Connection header
    expect(headers['anthropic-beta']).toBe('tools-2024')
    expect(headers['x-client-request-id']).toBe('client-rid')
  })

  it('forwards the same allowlist from a web Headers', async () => {
    const upstream = await recordingUpstream(() => ({
      status: 200,
      headers: sse,
      body: chatAnswer,
    }))
    await relay({
      sink: createRecordingSink(),
      adapter: anthropicMessages,
      request: { url: `${upstream.url}/v1/messages`, body: { model: 'm', stream: true } },
      policy: { maxAttempts: 1 },
      attempt: make({
        credential: 'sk-caller',
        clientHeaders: new Headers({ 'anthropic-version': '2025-01-01', 'x-api-key': 'client' }),
      }),
    })
    const headers = upstream.received[0]?.headers ?? {}
    expect(headers['x-api-key']).toBe('sk-caller')
    // The client's own version wins over the protocol's default.
    expect(headers['anthropic-version']).toBe('2025-01-01')
  })

  it('sends no credential without a pool and without `credential`', async () => {
    const upstream = await recordingUpstream(() => ({
      status: 200,
      headers: sse,
      body: chatAnswer,
    }))
    const outcome = await relay({
      sink: createRecordingSink(),
      adapter: openaiChat,
      request: { url: `${upstream.url}/v1/chat/completions`, body: { model: 'm', stream: true } },
      attempt: make(),
    })
    expect(outcome.kind).toBe('committed')
    expect(upstream.received[0]?.headers.authorization).toBeUndefined()
  })

  it("sends a fallback route's own request to its own URL", async () => {
    const primary = await recordingUpstream(() => ({ status: 500, headers: {}, body: '{}' }))
    const fallback = await recordingUpstream(() => ({
      status: 200,
      headers: sse,
      body: chatAnswer,
    }))
    const outcome = await relay({
      sink: createRecordingSink(),
      adapter: openaiChat,
      pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-a' }]),
      request: { url: `${primary.url}/v1/chat/completions`, body: { model: 'big', stream: true } },
      policy: {
        maxAttempts: 1,
        routes: [
          {
            name: 'small',
            adapter: openaiChat,
            pool: createMemoryKeyPool([{ id: 'b', secret: 'sk-b' }]),
            request: {
              url: `${fallback.url}/v1/chat/completions`,
              body: { model: 'small', stream: true },
            },
            attempt: make(),
          },
        ],
      },
      attempt: make(),
    })
    expect(outcome.kind).toBe('committed')
    expect(JSON.parse(fallback.received[0]?.body ?? '').model).toBe('small')
    expect(fallback.received[0]?.headers.authorization).toBe('Bearer sk-b')
  })

  it('never follows a redirect: the key does not reach the target', async () => {
    const target = await recordingUpstream(() => ({ status: 200, headers: sse, body: chatAnswer }))
    const redirecting = await recordingUpstream(() => ({
      status: 307,
      headers: { location: `${target.url}/steal` },
      body: '',
    }))
    const outcome = await relay({
      sink: createRecordingSink(),
      adapter: openaiChat,
      pool: createMemoryKeyPool([{ id: 'k', secret: 'sk-redirect' }]),
      request: {
        url: `${redirecting.url}/v1/chat/completions`,
        body: { model: 'm', stream: true },
      },
      attempt: make(),
    })
    expect(outcome.kind).toBe('failed')
    expect(target.received).toHaveLength(0)
    expect(redirecting.received).toHaveLength(1)
  })

  it('a continuation sends its prefilled request (the answer is whole, never restarted)', async () => {
    const upstream = createFaultyUpstream({ scenarios: { cut: ['partial-then-cut', 'ok'] } })
    const served = { url: await upstream.listen() }
    loopback.cleanup(() => upstream.close())
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      adapter: anthropicMessages,
      pool: createMemoryKeyPool([
        { id: 'a', secret: 'sk-a' },
        { id: 'b', secret: 'sk-b' },
      ]),
      request: {
        url: `${served.url}/v1/messages`,
        body: {
          model: 'claude-test',
          stream: true,
          max_tokens: 100,
          messages: [{ role: 'user', content: 'hi' }],
        },
      },
      policy: { continueAfterCut: true },
      attempt: make({
        clientHeaders: { 'x-fault-scenario': 'cut' },
        forwardHeaders: ['x-fault-scenario'],
      }),
    })
    expect(outcome.kind).toBe('committed')
    const second = upstream.requests[1]
    expect(second).toBeDefined()
    const messages = JSON.parse(second?.body ?? '{}').messages as { role: string }[]
    expect(messages.at(-1)?.role).toBe('assistant')
    const text = sink.text
    const deltas = [...text.matchAll(/"text":"([^"]*)"/g)].map((m) => m[1]).join('')
    expect(deltas).toBe('The quick brown fox jumps over the lazy dog.')
  })

  it('refuses wrong options when it is made, naming them', () => {
    expect(() => make({ forwardHeaders: 'x' as unknown as string[] })).toThrow(
      /forwardHeaders must be a list of header names/,
    )
    expect(() => make({ credential: '' })).toThrow(/credential must be a non-empty string/)
    expect(() => make(null as unknown as ReadyAttemptOptions)).toThrow(/takes an options object/)
  })

  it("reads the upstream's answer headers as its twin does: a 429's wait, the forwarded allowlist, repeated fields joined", async () => {
    let served = 0
    const server = createServer((req, res) => {
      withBody(req, () => {
        served++
        if (served === 1) {
          res.writeHead(429, { 'retry-after': '0', 'x-request-id': 'req_1' }).end('{}')
          return
        }
        // Raw pairs: repeated fields, mixed case, a cookie and a credential-looking value.
        res.writeHead(200, [
          ['Content-Type', 'text/event-stream'],
          ['X-Request-Id', 'req_2'],
          ['x-request-id', 'req_3'],
          ['x-ratelimit-remaining-requests', '59'],
          ['Set-Cookie', 'a=1'],
          ['openai-organization', 'org-1'],
          ['request-id', ' padded '],
        ])
        res.end(chatAnswer)
      })
    })
    const url = await loopback.listen(server)
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      adapter: openaiChat,
      pool: createMemoryKeyPool([
        { id: 'k1', secret: 'sk-one' },
        { id: 'k2', secret: 'sk-two' },
      ]),
      request: { url: `${url}/v1/chat/completions`, body: { model: 'm', stream: true } },
      policy: { forwardHeaders: { rateLimit: true } },
      attempt: make(),
    })
    expect(outcome.kind).toBe('committed')
    expect(outcome.attempts.map((attempt) => attempt.status)).toEqual([429, 200])
    const head = sink.events.find((event) => event.type === 'head')
    expect(head?.type === 'head' ? Object.fromEntries(head.headers) : undefined).toEqual({
      'cache-control': 'no-cache, no-transform',
      'content-type': 'text/event-stream; charset=utf-8',
      'request-id': 'padded',
      'x-accel-buffering': 'no',
      'x-ratelimit-remaining-requests': '59',
      'x-request-id': 'req_2, req_3',
    })
  })

  it('without a request to send, the relay gives up honestly and nothing goes upstream', async () => {
    const upstream = await recordingUpstream(() => ({
      status: 200,
      headers: sse,
      body: chatAnswer,
    }))
    const sink = createRecordingSink()
    const outcome = await relay({ sink, adapter: openaiChat, attempt: make({ url: upstream.url }) })
    expect(outcome.kind).toBe('failed')
    expect(upstream.received).toHaveLength(0)
    expect(sink.status).toBeGreaterThanOrEqual(500)
  })
})
