import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, request, type ServerResponse } from 'node:http'
import { AggregationTemporality, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'
import { describe, expect, it } from 'vitest'
import { anthropicDownstream } from '../../examples/anthropic-over-openai-gateway.js'
import {
  createMemoryKeyPool,
  createResilientFetch,
  type ForwardHeadersPolicy,
  geminiGenerateContent,
  type KeyPool,
  openaiChat,
  type RelayOptions,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  type StreamAdapter,
  webSink,
} from '../../src/index.js'
import { nodeResponse } from '../../src/node.js'
import { createRelayTelemetry } from '../../src/otel/index.js'
import { useRedisPools } from '../redis/redis-server.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * Every exit is a redaction point: a key the library put on an attempt never leaves in a
 * forwarded header (any allowlist), an error frame after output (by value and by shape, with
 * no pool and no `secrets` too), a whole answer's body, the outcome's `response` identity, or
 * a span or metric attribute. Each case runs on its twins: `relay()` and
 * `createResilientFetch`, streaming and whole, memory pool, Redis pool and no pool, the
 * client's protocol and a translated one.
 */

const { listen } = useLoopback()
const redis = useRedisPools('secret-exits')

type PoolKind = 'memory' | 'redis' | 'none'
/** `relay-node`: relay() with attempts made with `node:http` (`nodeResponse`). */
type Front = 'relay' | 'relay-node' | 'fetch'
type Protocol = 'chat' | 'gemini'

interface Twin {
  readonly front: Front
  readonly pool: PoolKind
  readonly stream: boolean
  /** The client gets Anthropic Messages from a Chat upstream (`policy.downstream`). */
  readonly translated?: boolean
}

/** What an upstream request carried. */
interface Seen {
  readonly key: string
  readonly streaming: boolean
  readonly url: string
}

type Handler = (seen: Seen, res: ServerResponse) => void

/** The key a request carried, wherever the adapter put it. */
function keyOf(req: IncomingMessage): string {
  const bearer = req.headers.authorization?.replace(/^Bearer /, '')
  const header = req.headers['x-goog-api-key'] ?? req.headers['x-api-key']
  const query = new URL(req.url ?? '/', 'http://x').searchParams.get('key')
  return bearer ?? (typeof header === 'string' ? header : undefined) ?? query ?? ''
}

async function upstream(handler: Handler): Promise<string> {
  const server = createServer((req, res) => {
    withBody(req, (body) => {
      const url = req.url ?? '/'
      const streaming = url.includes('streamGenerateContent') || body.includes('"stream":true')
      handler({ key: keyOf(req), streaming, url }, res)
    })
  })
  return listen(server)
}

const secretShape = { chat: 'sk-proj-', gemini: 'AIza' } as const

/** A fresh key of the protocol's shape: by shape, redaction can find it with no pool too. */
function freshKey(protocol: Protocol): string {
  return `${secretShape[protocol]}${randomBytes(18).toString('base64url').replace(/[-_]/g, 'x')}`
}

class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE })
  }
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

/** Everything the library emitted for one request. */
interface Exchange {
  readonly status: number
  readonly headers: Headers
  readonly body: string
  readonly outcome: RelayOutcome
  /** Every span and metric attribute value, as text. */
  readonly telemetry: readonly string[]
}

function poolOf(kind: PoolKind, key: string): KeyPool | undefined {
  const keys = [{ id: 'only', secret: key }]
  if (kind === 'memory') return createMemoryKeyPool(keys)
  if (kind === 'redis') return redis.pool(keys)
  return undefined
}

const basePolicy: RelayPolicy = { maxAttempts: 1, backoff: { baseMs: 1, maxMs: 2 } }

/** One request through the twin's front end, against an upstream that knows `key`. */
async function exchange(
  twin: Twin,
  protocol: Protocol,
  base: string,
  key: string,
  forwardHeaders?: ForwardHeadersPolicy,
): Promise<Exchange> {
  const exporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  })
  const reader = new TestReader()
  const telemetry = createRelayTelemetry({
    tracerProvider,
    meterProvider: new MeterProvider({ readers: [reader] }),
  })
  const outcomes: RelayOutcome[] = []
  const hooks = telemetry.withHooks({ onOutcome: (outcome) => outcomes.push(outcome) })
  const policy: RelayPolicy = {
    ...basePolicy,
    ...(forwardHeaders === undefined ? {} : { forwardHeaders }),
    ...(twin.translated === true ? { downstream: anthropicDownstream('frames') } : {}),
  }
  const pool = poolOf(twin.pool, key)
  const adapter: StreamAdapter = protocol === 'chat' ? openaiChat : geminiGenerateContent
  const body =
    protocol === 'chat'
      ? JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'hi' }],
          stream: twin.stream,
        })
      : JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] })
  const path =
    protocol === 'chat'
      ? '/v1/chat/completions'
      : `/v1beta/models/g:${twin.stream ? 'streamGenerateContent?alt=sse' : 'generateContent'}`
  // Without a pool the caller's own key goes where a user puts it: a bearer, or Gemini's `?key=`.
  const withKey = (secret: string) =>
    protocol === 'chat'
      ? `${base}${path}`
      : `${base}${path}${path.includes('?') ? '&' : '?'}key=${secret}`
  const chatAuth = (secret: string) =>
    protocol === 'chat' ? { authorization: `Bearer ${secret}` } : ({} as Record<string, string>)
  let response: Response
  if (twin.front !== 'fetch') {
    const send = twin.front === 'relay' ? fetch : nodeFetch
    const { sink, response: answered } = webSink()
    const options = {
      sink,
      adapter,
      stream: twin.stream,
      policy,
      hooks,
      ...(pool === undefined ? {} : { pool }),
      attempt: ({ key: leased, signal }: { key?: { secret: string }; signal: AbortSignal }) => {
        const secret = leased?.secret ?? key
        const url = leased === undefined ? withKey(secret) : `${base}${path}`
        const credential =
          protocol === 'chat'
            ? chatAuth(secret)
            : leased === undefined
              ? {}
              : { 'x-goog-api-key': secret }
        return send(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...credential },
          body,
          signal,
        })
      },
    } as unknown as RelayOptions
    void relay(options)
    response = await answered
  } else {
    const resilient = createResilientFetch({
      policy,
      hooks,
      adapter,
      ...(pool === undefined ? {} : { pool }),
    })
    response = await resilient(pool === undefined ? withKey(key) : `${base}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(pool === undefined ? chatAuth(key) : {}),
      },
      body,
    })
  }
  const text = await response.text()
  await expect.poll(() => outcomes.length).toBe(1)
  await expect.poll(() => exporter.getFinishedSpans().length).toBeGreaterThan(0)
  const { resourceMetrics } = await reader.collect()
  const metricAttributes = resourceMetrics.scopeMetrics
    .flatMap((scope) => scope.metrics)
    .flatMap((metric) => metric.dataPoints.map((point) => point.attributes))
  const spanAttributes = exporter.getFinishedSpans().map((span) => span.attributes)
  return {
    status: response.status,
    headers: response.headers,
    body: text,
    outcome: outcomes[0] as RelayOutcome,
    telemetry: [...spanAttributes, ...metricAttributes].flatMap((attributes) =>
      Object.values(attributes).map((value) => JSON.stringify(value)),
    ),
  }
}

/** A POST with `node:http`, answered as `nodeResponse` makes it. */
function nodeFetch(
  url: string,
  init: { headers: Record<string, string>; body: string; signal: AbortSignal },
): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', headers: init.headers, signal: init.signal },
      (res) => resolve(nodeResponse(res)),
    )
    req.once('error', reject)
    req.end(init.body)
  })
}

/** Asserts `key` is in nothing the exchange emitted: headers, body, outcome, telemetry. */
function expectNoKey(exchange: Exchange, key: string, options: { body?: boolean } = {}): void {
  for (const [name, value] of exchange.headers) expect(`${name}: ${value}`).not.toContain(key)
  if (options.body !== false) expect(exchange.body).not.toContain(key)
  expect(JSON.stringify(exchange.outcome)).not.toContain(key)
  for (const value of exchange.telemetry) expect(value).not.toContain(key)
}

const json = { 'content-type': 'application/json' }

function chatChunk(delta: object, finish: string | null = null, id = 'chatcmpl-1'): string {
  return `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
}

/** A whole Chat answer, streamed or not. */
function chatAnswer(
  res: ServerResponse,
  streaming: boolean,
  headers: Record<string, string> = {},
  identity: { id: string; model: string } = { id: 'chatcmpl-1', model: 'm' },
): void {
  if (streaming) {
    res.writeHead(200, { 'content-type': 'text/event-stream', ...headers })
    const frame = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ ...identity, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    return void res.end(
      `${frame({ role: 'assistant', content: 'Hello' })}${frame({}, 'stop')}data: [DONE]\n\n`,
    )
  }
  res.writeHead(200, { ...json, ...headers })
  const message = { role: 'assistant', content: 'Hello' }
  res.end(
    JSON.stringify({
      ...identity,
      object: 'chat.completion',
      choices: [{ index: 0, message, finish_reason: 'stop' }],
    }),
  )
}

/** The headers an upstream may echo a key in: request ids and credentials. */
function echoingHeaders(key: string): Record<string, string> {
  return {
    'x-request-id': `req_${key}`,
    'request-id': key,
    'x-api-key': key,
    authorization: `Bearer ${key}`,
    'x-goog-api-key': key,
    'api-key': key,
    'set-cookie': `session=${key}`,
    'x-trace': 'kept',
  }
}

const allTwins: readonly Twin[] = (['relay', 'relay-node', 'fetch'] as const).flatMap((front) =>
  (front === 'relay-node'
    ? (['memory', 'none'] as const)
    : (['memory', 'redis', 'none'] as const)
  ).flatMap((pool) => [
    { front, pool, stream: true },
    { front, pool, stream: false },
    { front, pool, stream: true, translated: true },
  ]),
)
const streamingTwins = allTwins.filter((twin) => twin.stream)
const name = (twin: Twin) =>
  `${twin.front === 'relay-node' ? 'relay (node:http attempts)' : twin.front}, ${twin.pool} pool, ${twin.stream ? 'streaming' : 'whole'}${twin.translated === true ? ', translated' : ''}`

const credentialNames = [
  'x-api-key',
  'authorization',
  'x-goog-api-key',
  'api-key',
  'set-cookie',
] as const

describe('a key echoed in an upstream response header never reaches the client', () => {
  it.each(allTwins.map((twin) => [name(twin), twin] as const))(
    '%s: default allowlist: the request ids go out with the key redacted',
    async (_, twin) => {
      const key = freshKey('chat')
      const base = await upstream((seen, res) =>
        chatAnswer(res, seen.streaming, echoingHeaders(seen.key)),
      )
      const got = await exchange(twin, 'chat', base, key)
      expect(got.status).toBe(200)
      expectNoKey(got, key)
      expect(got.headers.get('x-request-id')).toBe('req_[redacted]')
      expect(got.headers.get('request-id')).toBe('[redacted]')
    },
  )

  it.each(allTwins.map((twin) => [name(twin), twin] as const))(
    '%s: a permissive allowlist passes no credential header, and redacts the rest',
    async (_, twin) => {
      const key = freshKey('chat')
      const base = await upstream((seen, res) =>
        chatAnswer(res, seen.streaming, echoingHeaders(seen.key)),
      )
      const got = await exchange(twin, 'chat', base, key, () => true)
      expect(got.status).toBe(200)
      expectNoKey(got, key)
      for (const header of credentialNames) expect(got.headers.get(header)).toBeNull()
      expect(got.headers.get('x-trace')).toBe('kept')
      expect(got.headers.get('x-request-id')).toBe('req_[redacted]')
    },
  )

  it.each(
    allTwins.filter((twin) => twin.translated !== true).map((twin) => [name(twin), twin] as const),
  )('%s: an error answer passed on (a 400) carries the request id redacted', async (_, twin) => {
    const key = freshKey('chat')
    const base = await upstream((seen, res) => {
      res.writeHead(400, { ...json, ...echoingHeaders(seen.key) })
      res.end(
        JSON.stringify({
          error: { type: 'invalid_request_error', message: 'bad request', code: null },
        }),
      )
    })
    const got = await exchange(twin, 'chat', base, key, () => true)
    expect(got.status).toBe(400)
    expectNoKey(got, key)
    expect(got.headers.get('x-request-id')).toBe('req_[redacted]')
    for (const header of credentialNames) expect(got.headers.get(header)).toBeNull()
  })
})

describe('an error frame after output is redacted by value and by shape, with or without a pool', () => {
  it.each(streamingTwins.map((twin) => [name(twin), twin] as const))(
    '%s: an OpenAI Chat error frame after a content frame quoting the sk-proj key',
    async (_, twin) => {
      const key = freshKey('chat')
      const base = await upstream((seen, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.end(
          `${chatChunk({ role: 'assistant', content: 'Hel' })}data: ${JSON.stringify({ error: { type: 'server_error', message: `upstream refused key ${seen.key}` } })}\n\n`,
        )
      })
      const got = await exchange(twin, 'chat', base, key)
      expect(got.status).toBe(200)
      expect(got.body).toContain('Hel')
      expect(got.body).toContain('[redacted]')
      expectNoKey(got, key)
    },
  )

  it.each(
    streamingTwins
      .filter((twin) => twin.translated !== true)
      .map((twin) => [name(twin), twin] as const),
  )('%s: a Gemini error chunk after output quoting the URL with ?key=AIza…', async (_, twin) => {
    const key = freshKey('gemini')
    const base = await upstream((seen, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      const text = {
        candidates: [{ content: { role: 'model', parts: [{ text: 'Hel' }] }, index: 0 }],
      }
      const url = `https://generativelanguage.googleapis.com/v1beta/models/g:streamGenerateContent?alt=sse&key=${seen.key}`
      const error = { error: { code: 500, message: `fetch failed: ${url}`, status: 'INTERNAL' } }
      res.end(`data: ${JSON.stringify(text)}\n\ndata: ${JSON.stringify(error)}\n\n`)
    })
    const got = await exchange(twin, 'gemini', base, key)
    expect(got.status).toBe(200)
    expect(got.body).toContain('Hel')
    expect(got.body).toContain('key=[redacted]')
    expectNoKey(got, key)
  })
})

describe("a key in a completed answer's id or model reaches no outcome, span or metric", () => {
  it.each(allTwins.map((twin) => [name(twin), twin] as const))(
    '%s: gen_ai.response.id and gen_ai.response.model are redacted',
    async (_, twin) => {
      const key = freshKey('chat')
      const base = await upstream((seen, res) =>
        chatAnswer(res, seen.streaming, {}, { id: `chatcmpl-${seen.key}`, model: seen.key }),
      )
      const got = await exchange(twin, 'chat', base, key)
      expect(got.status).toBe(200)
      // Without a pool and without `secrets`, relay() cannot know the key: the answer's own
      // frames are the model's and are redacted by value only (outcome and spans by shape).
      const known = twin.pool !== 'none' || twin.front === 'fetch'
      expectNoKey(got, key, { body: known })
      expect(got.outcome.kind).toBe('committed')
      if (got.outcome.kind === 'committed') {
        expect(got.outcome.response).toEqual({ id: 'chatcmpl-[redacted]', model: '[redacted]' })
      }
      expect(got.telemetry).toContain(JSON.stringify('chatcmpl-[redacted]'))
    },
  )
})
