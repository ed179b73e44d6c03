import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createResilientFetch,
  type FetchFunction,
  type KeyPool,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  type Route,
  relay,
} from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { useRedisPools } from '../redis/redis-server.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * The retry rules of the reference designs this library follows (a Claude→Responses
 * gateway's pre-first-token retry, Claude Code's `withRetry`, new-api's early-flush
 * contract), each checked through real HTTP on both twins: `relay()` behind a `node:http`
 * gateway, and `createResilientFetch()`.
 */

const { listen } = useLoopback()
const redis = useRedisPools('reference-rules')

const answer = 'The quick brown fox'
const json = { 'content-type': 'application/json' }

/** What an upstream does with its `n`-th request (from 0). */
type Handler = (
  request: { n: number; streaming: boolean; headers: IncomingMessage['headers'] },
  res: ServerResponse,
) => void

function chunk(delta: object, finish: string | null = null): string {
  return `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
}

/** A whole answer, streamed or not, as the client asked. */
function ok(res: ServerResponse, streaming: boolean, text = answer): void {
  if (streaming) {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    return void res.end(`${chunk({ content: text })}${chunk({}, 'stop')}data: [DONE]\n\n`)
  }
  res.writeHead(200, json)
  const choice = { index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }
  res.end(JSON.stringify({ id: 'c', object: 'chat.completion', choices: [choice] }))
}

function overloaded529(res: ServerResponse): void {
  res.writeHead(529, json)
  res.end('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
}

/** An upstream on 127.0.0.1 whose requests are answered by `handler`, and counted. */
async function upstream(handler: Handler) {
  const seen: { streaming: boolean; headers: IncomingMessage['headers'] }[] = []
  const server = createServer((req, res) => {
    withBody(req, (body) => {
      const streaming = (JSON.parse(body) as { stream?: boolean }).stream === true
      const n = seen.length
      seen.push({ streaming, headers: req.headers })
      handler({ n, streaming, headers: req.headers }, res)
    })
  })
  const url = await listen(server)
  return { url: `${url}/v1/chat/completions`, seen }
}

const pool = (...ids: string[]): KeyPool =>
  createMemoryKeyPool(ids.map((id) => ({ id, secret: `sk-${id}-0123456789abcdef` })))

const bodyOf = (stream: boolean) =>
  JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream })

/** What the client got, and the relay's outcome. */
interface Result {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly outcome: RelayOutcome
}

interface Twin {
  readonly name: string
  /** Sends one request through the twin; `routes` are tried after the first upstream. */
  send(options: {
    url: string
    stream: boolean
    policy: RelayPolicy
    pool?: KeyPool
    fetch?: FetchFunction
    /** Called with the response as soon as its head is in (before the body is read). */
    onHead?: (response: Response) => void
  }): Promise<Result>
}

/** A route to another upstream with its own pool, sent with the global fetch. */
function routeTo(name: string, url: string, keys: KeyPool): Route {
  return {
    name,
    adapter: openaiChat,
    pool: keys,
    attempt: ({ key, signal, request }) =>
      fetch(url, {
        method: 'POST',
        headers: { ...json, authorization: `Bearer ${key.secret}` },
        body: JSON.stringify(request?.body),
        signal,
      }),
  }
}

const viaRelay: Twin = {
  name: 'relay',
  async send({ url, stream, policy, pool: keys, fetch: send = fetch, onHead }) {
    const body = bodyOf(stream)
    let outcome: RelayOutcome | undefined
    const gateway = createServer((req, res) => {
      req.resume()
      void relay({
        sink: nodeSink(res),
        adapter: openaiChat,
        policy,
        request: { url, body: JSON.parse(body) as Record<string, unknown> },
        pool: keys ?? pool('a', 'b'),
        attempt: ({ key, signal, request }) =>
          send(url, {
            method: 'POST',
            headers: { ...json, authorization: `Bearer ${key.secret}` },
            body: JSON.stringify(request?.body),
            signal,
          }),
      }).then((ended) => {
        outcome = ended
      })
    })
    const gatewayUrl = await listen(gateway)
    const response = await fetch(gatewayUrl, { method: 'POST', headers: json, body })
    onHead?.(response)
    const text = await response.text()
    await expect.poll(() => outcome).toBeDefined()
    return {
      status: response.status,
      headers: response.headers,
      text,
      outcome: outcome as RelayOutcome,
    }
  },
}

const viaFetch: Twin = {
  name: 'createResilientFetch',
  async send({ url, stream, policy, pool: keys, fetch: inner, onHead }) {
    let outcome: RelayOutcome | undefined
    const resilient = createResilientFetch({
      policy,
      pool: keys ?? pool('a', 'b'),
      ...(inner === undefined ? {} : { fetch: inner }),
      onOutcome: (ended) => {
        outcome = ended
      },
    })
    const response = await resilient(url, { method: 'POST', headers: json, body: bodyOf(stream) })
    onHead?.(response)
    const text = await response.text()
    await expect.poll(() => outcome).toBeDefined()
    return {
      status: response.status,
      headers: response.headers,
      text,
      outcome: outcome as RelayOutcome,
    }
  },
}

const fast: RelayPolicy = { backoff: { baseMs: 5, maxMs: 20 } }

/** The text a client got, from a stream's content deltas or a whole answer's message. */
function contentOf(text: string, stream: boolean): string {
  if (!stream) {
    const parsed = JSON.parse(text) as { choices?: { message?: { content?: string } }[] }
    return parsed.choices?.[0]?.message?.content ?? ''
  }
  return text
    .split('\n')
    .filter((line) => line.startsWith('data: {'))
    .map(
      (line) =>
        (JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]
          ?.delta?.content ?? '',
    )
    .join('')
}

describe.each([viaRelay, viaFetch])('reference retry rules through $name', (twin) => {
  describe.each([true, false])('stream: %s', (stream) => {
    it('model fallback on a long rate limit: every key of route A limited past maxWaitMs, route B answers', async () => {
      const a = await upstream((_, res) => {
        res.writeHead(429, { ...json, 'retry-after': '30' })
        res.end('{"error":{"type":"rate_limit_error","message":"slow down"}}')
      })
      const b = await upstream(({ streaming }, res) => ok(res, streaming, 'from route B'))
      const result = await twin.send({
        url: a.url,
        stream,
        policy: { ...fast, maxWaitMs: 5_000, routes: [routeTo('B', b.url, pool('b1'))] },
      })
      expect(result.status).toBe(200)
      expect(contentOf(result.text, stream)).toBe('from route B')
      expect(result.outcome).toMatchObject({ kind: 'committed', route: 'B' })
      // Each key of route A was tried once; their 30 s cooldowns were not waited out.
      expect(a.seen).toHaveLength(2)
      expect(b.seen).toHaveLength(1)
    })

    it('model fallback without retry-after: a one-key route falls back at once, not after its default cooldowns', async () => {
      const a = await upstream((_, res) => {
        res.writeHead(429, json)
        res.end('{"error":{"type":"rate_limit_error","message":"slow down"}}')
      })
      const b = await upstream(({ streaming }, res) => ok(res, streaming, 'from route B'))
      const result = await twin.send({
        url: a.url,
        stream,
        pool: pool('only'),
        policy: { ...fast, routes: [routeTo('B', b.url, pool('b1'))] },
      })
      expect(contentOf(result.text, stream)).toBe('from route B')
      expect(a.seen).toHaveLength(1)
      // The key's 10 s default cooldown was not waited out before falling back.
      expect(result.outcome.durationMs).toBeLessThan(5_000)
    })

    it('REPEATED_529: an always-overloaded provider is asked 3 times, not maxAttempts (10) times', async () => {
      const a = await upstream((_, res) => overloaded529(res))
      const result = await twin.send({
        url: a.url,
        stream,
        policy: { ...fast, maxAttempts: 10 },
      })
      expect(a.seen).toHaveLength(3)
      expect(result.status).toBe(529)
      expect(result.outcome).toMatchObject({ kind: 'failed', reason: 'status-529' })
      expect(result.outcome.attempts.map((attempt) => attempt.result)).toEqual([
        'status-529',
        'status-529',
        'status-529',
      ])
    })

    it('overloaded_error in a 4xx body is retried on the error type, like a 529', async () => {
      const a = await upstream(({ n, streaming }, res) => {
        if (n > 0) return ok(res, streaming)
        res.writeHead(400, json)
        res.end('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
      })
      const result = await twin.send({ url: a.url, stream, policy: fast })
      expect(result.status).toBe(200)
      expect(contentOf(result.text, stream)).toBe(answer)
      expect(a.seen).toHaveLength(2)
    })

    it('a stringified JSON error is unwrapped: the inner message and type, not the raw string', async () => {
      const inner = JSON.stringify({
        type: 'error',
        error: { type: 'invalid_request_error', message: 'prompt is too long: 210000 tokens' },
      })
      const a = await upstream((_, res) => {
        res.writeHead(400, json)
        res.end(JSON.stringify({ error: { message: inner, type: 'api_error' } }))
      })
      const result = await twin.send({
        url: a.url,
        stream,
        policy: { ...fast, passThroughErrors: false },
      })
      expect(result.status).toBe(400)
      expect(result.outcome).toMatchObject({
        kind: 'failed',
        error: { type: 'invalid_request_error', message: 'prompt is too long: 210000 tokens' },
      })
      const sent = JSON.parse(result.text) as { error: { message: string; type: string } }
      expect(sent.error.message).toBe('prompt is too long: 210000 tokens')
      expect(result.text).not.toContain('\\"type\\"')
      // Refused for its request: not retried.
      expect(a.seen).toHaveLength(1)
    })

    it('a stringified overloaded_error inside a 4xx is retried too', async () => {
      const inner = JSON.stringify({
        type: 'error',
        error: { type: 'overloaded_error', message: 'Overloaded' },
      })
      const a = await upstream(({ n, streaming }, res) => {
        if (n > 0) return ok(res, streaming)
        res.writeHead(400, json)
        res.end(JSON.stringify({ error: { message: inner } }))
      })
      const result = await twin.send({ url: a.url, stream, policy: fast })
      expect(contentOf(result.text, stream)).toBe(answer)
      expect(a.seen).toHaveLength(2)
    })
  })

  it('non-streaming fallback with its own retries: after the streams fail it retries on its own rules', async () => {
    // Streams always end empty; the first non-streaming request gets a 503, the second answers.
    let wholeRequests = 0
    const a = await upstream(({ streaming }, res) => {
      if (streaming) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        return void res.end(chunk({ role: 'assistant' }))
      }
      if (wholeRequests++ === 0) {
        res.writeHead(503, json)
        return void res.end('{"error":{"type":"server_error","message":"unavailable"}}')
      }
      ok(res, false, 'from the fallback')
    })
    const result = await twin.send({
      url: a.url,
      stream: true,
      policy: { ...fast, maxAttempts: 2, nonStreamingFallback: true },
    })
    expect(result.status).toBe(200)
    expect(contentOf(result.text, true)).toBe('from the fallback')
    expect(a.seen.map((seen) => seen.streaming)).toEqual([true, true, false, false])
    expect(result.outcome).toMatchObject({ kind: 'committed', mode: 'non-streaming' })
    expect(result.outcome.attempts.map((attempt) => [attempt.mode, attempt.result])).toEqual([
      ['stream', 'empty'],
      ['stream', 'empty'],
      ['non-streaming', 'status-503'],
      ['non-streaming', 'committed'],
    ])
  })

  it('non-streaming fallback keeps the 529 count: two overloaded streams, one overloaded fallback, then stop', async () => {
    const a = await upstream((_, res) => overloaded529(res))
    const result = await twin.send({
      url: a.url,
      stream: true,
      policy: { ...fast, maxAttempts: 2, nonStreamingFallback: true },
    })
    expect(a.seen.map((seen) => seen.streaming)).toEqual([true, true, false])
    expect(result.status).toBe(529)
  })

  it('x-client-request-id only to the first-party API: a third-party host gets no header, api.openai.com does', async () => {
    const a = await upstream(({ streaming }, res) => ok(res, streaming))
    // The provider's own API, reached over real HTTP: its host name is mapped to the loopback upstream.
    const toLoopback: FetchFunction = (input, init) =>
      fetch(
        String(input instanceof Request ? input.url : input).replace(
          /^https:\/\/api\.openai\.com\/v1\/chat\/completions/,
          a.url,
        ),
        init,
      )
    await twin.send({ url: a.url, stream: true, policy: fast })
    await twin.send({
      url: 'https://api.openai.com/v1/chat/completions',
      stream: true,
      policy: fast,
      fetch: toLoopback,
    })
    const [thirdParty, firstParty] = a.seen.map((seen) => seen.headers['x-client-request-id'])
    if (twin === viaFetch) {
      expect(thirdParty).toBeUndefined()
      expect(firstParty).toMatch(/^[0-9a-f-]{36}$/)
    } else {
      // relay() leaves the header to the attempt function (this one sends none).
      expect([thirdParty, firstParty]).toEqual([undefined, undefined])
    }
  })

  it('new-api: with the first-output timeout off, 200 and the SSE head are flushed before the first model frame', async () => {
    let release: () => void = () => {}
    // Set when the upstream lets its first frame go: on the client's head, or at the 3 s bound.
    let sentFirstFrame = false
    const released = new Promise<void>((resolve) => {
      release = resolve
    })
    const a = await upstream((_, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(': keep-alive\n\n')
      // Held back until the client saw the head, or 3 s at most (the test then fails).
      setTimeout(() => {
        sentFirstFrame = true
        release()
      }, 3_000)
      void released.then(() => {
        res.end(`${chunk({ content: answer })}${chunk({}, 'stop')}data: [DONE]\n\n`)
      })
    })
    let headAt: { status: number; type: string | null; released: boolean } | undefined
    const result = await twin.send({
      url: a.url,
      stream: true,
      policy: { ...fast, peek: { firstOutputTimeoutMs: Number.POSITIVE_INFINITY } },
      onHead: (response) => {
        headAt = {
          status: response.status,
          type: response.headers.get('content-type'),
          released: sentFirstFrame,
        }
        sentFirstFrame = true
        release()
      },
    })
    // The head came while the upstream still held its first frame back.
    expect(headAt).toMatchObject({ status: 200, released: false })
    expect(headAt?.type).toMatch(/^text\/event-stream/)
    expect(contentOf(result.text, true)).toBe(answer)
  })
})

describe.each([viaRelay, viaFetch])(
  'reference retry rules on a Redis pool, through $name',
  (twin) => {
    it('model fallback on a long rate limit: the Redis pool’s cooling keys send the request to route B', async () => {
      const a = await upstream((_, res) => {
        res.writeHead(429, { ...json, 'retry-after': '30' })
        res.end('{"error":{"type":"rate_limit_error","message":"slow down"}}')
      })
      const b = await upstream(({ streaming }, res) => ok(res, streaming, 'from route B'))
      const keys = ['a', 'b'].map((id) => ({ id, secret: `sk-redis-${id}-0123456789abcdef` }))
      const result = await twin.send({
        url: a.url,
        stream: true,
        pool: redis.pool(keys),
        policy: { ...fast, maxWaitMs: 5_000, routes: [routeTo('B', b.url, pool('b1'))] },
      })
      expect(contentOf(result.text, true)).toBe('from route B')
      expect(result.outcome).toMatchObject({ kind: 'committed', route: 'B' })
      expect(a.seen).toHaveLength(2)
    })

    it('REPEATED_529 on a Redis pool: 3 requests with maxAttempts 10', async () => {
      const a = await upstream((_, res) => overloaded529(res))
      const keys = ['a', 'b', 'c'].map((id) => ({ id, secret: `sk-redis-${id}-0123456789abcdef` }))
      const result = await twin.send({
        url: a.url,
        stream: true,
        pool: redis.pool(keys),
        policy: { ...fast, maxAttempts: 10 },
      })
      expect(a.seen).toHaveLength(3)
      expect(result.status).toBe(529)
    })
  },
)
