import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { SpanStatusCode } from '@opentelemetry/api'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { anthropicDownstream } from '../../examples/anthropic-over-openai-gateway.js'
import {
  createMemoryKeyPool,
  createResilientFetch,
  type DownstreamSink,
  type KeyPool,
  openaiChat,
  type RelayHooks,
  type RelayOutcome,
  relay,
  webSink,
} from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { createRelayTelemetry } from '../../src/otel/index.js'
import { useRedisPools } from '../redis/redis-server.js'
import { chunk, done, startChatUpstream } from '../support/chat-upstream.js'

/**
 * A finished answer is a success (invariant 22): once the sink has written the whole answer
 * (its `close()` resolved), no abort, `close` event or signal arriving afterwards turns the
 * outcome, the key's record or the request's span into a failure. README use 1 wires
 * `res.once('close', () => client.abort())`, and `close` fires after every response that
 * finished, so each order of finish / close / abort is driven here, for streams and whole
 * answers, `nodeSink` and `webSink`, `relay()` and `createResilientFetch`, memory and Redis.
 */

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const streamed = 'The whole answer.'
const wholeAnswer = {
  id: 'chatcmpl-whole',
  object: 'chat.completion',
  created: 1,
  model: 'gpt-test',
  choices: [{ index: 0, message: { role: 'assistant', content: streamed }, finish_reason: 'stop' }],
}

/**
 * An OpenAI Chat upstream: a stream with a pause mid-answer and another between its last
 * event and its end (so an abort can land in each), or a whole JSON answer.
 */
async function startUpstream(): Promise<string> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (piece: Buffer) => chunks.push(piece))
    req.on('end', async () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}')
      if (body.stream !== true) {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify(wholeAnswer))
        return
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(chunk({ role: 'assistant', content: 'The whole ' }))
      await sleep(15)
      if (res.destroyed) return
      res.write(chunk({ content: 'answer.' }) + chunk({}, 'stop') + done)
      await sleep(15)
      res.end()
    })
  })
  const url = await listen(server)
  return `${url}/v1/chat/completions`
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  )
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/**
 * When the host's abort lands. `before-output`: while the attempt is sent; `mid-answer`: at
 * the first content write (streams only); `after-last-write`: when the sink took the write
 * that ends the answer, before `close()`; `during-close`: right after the sink's `close()`
 * was called; `close-resolved`: when it resolved, before the relay hears of it; `after-relay`:
 * once `relay()` resolved.
 */
type Order =
  | 'before-output'
  | 'mid-answer'
  | 'after-last-write'
  | 'during-close'
  | 'close-resolved'
  | 'after-relay'

const orders: readonly Order[] = [
  'before-output',
  'mid-answer',
  'after-last-write',
  'during-close',
  'close-resolved',
  'after-relay',
]

const decoder = new TextDecoder()

/** The sink, with the host's abort fired at the order's moment. */
function triggered(sink: DownstreamSink, order: Order, abort: () => void): DownstreamSink {
  let wrote = false
  return {
    get signal() {
      return sink.signal
    },
    sendHead: (status, headers) => sink.sendHead(status, headers),
    flush: () => sink.flush?.(),
    abort: (reason) => sink.abort(reason),
    write(bytes) {
      const first = !wrote
      wrote = true
      if (order === 'mid-answer' && first) abort()
      const written = sink.write(bytes)
      const text = decoder.decode(bytes)
      // Once the sink took the write that ends the answer (the relay has seen it taken).
      if (
        order === 'after-last-write' &&
        (text.includes('[DONE]') ||
          text.includes('message_stop') ||
          text.includes('"object":"chat.completion"'))
      )
        void Promise.resolve(written).then(() => setImmediate(abort))
      return written
    },
    async close() {
      const closed = sink.close()
      if (order === 'during-close') abort()
      await closed
      if (order === 'close-resolved') abort()
    },
  }
}

type Mode = 'stream' | 'whole'

/** What each order must leave: the outcome's end, the key's record, the span's status. */
function expected(mode: Mode, order: Order) {
  if (order === 'before-output')
    return { kind: 'client-gone', end: undefined, key: 'client-gone', spanError: false } as const
  if (order === 'mid-answer' && mode === 'stream')
    return { kind: 'committed', end: 'aborted', key: 'client-gone', spanError: true } as const
  return { kind: 'committed', end: 'completed', key: 'success', spanError: false } as const
}

function telemetry() {
  const exporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  })
  const otel = createRelayTelemetry({ tracerProvider })
  const outcomes: RelayOutcome[] = []
  const hooks: RelayHooks = otel.withHooks({ onOutcome: (outcome) => outcomes.push(outcome) })
  /** The request's spans (not the attempts'). */
  const requestSpans = (): ReadableSpan[] =>
    exporter
      .getFinishedSpans()
      .filter((span) => span.attributes['stream_boundary.outcome'] !== undefined)
  return { hooks, outcomes, requestSpans }
}

const requestBody = (mode: Mode) =>
  JSON.stringify({
    model: 'gpt-test',
    messages: [{ role: 'user', content: 'hi' }],
    stream: mode === 'stream',
  })

type SinkKind = 'nodeSink' | 'webSink' | 'webSink, translated'

/**
 * One request through `relay()` over the sink, with the host's signal aborted at the order's
 * moment; resolves with what the client read (`null` when its read failed).
 */
async function relayOnce(
  sinkKind: SinkKind,
  mode: Mode,
  order: Order,
  pool: KeyPool,
  hooks: RelayHooks,
): Promise<{ text: string | null; outcome: RelayOutcome }> {
  const upstreamUrl = await startUpstream()
  const host = new AbortController()
  const body = requestBody(mode)
  const options = (sink: DownstreamSink) => ({
    sink: triggered(sink, order, () => host.abort()),
    adapter: openaiChat,
    pool,
    signal: host.signal,
    hooks,
    request: { url: upstreamUrl, body: JSON.parse(body) },
    // The twin in another protocol: an OpenAI upstream told to an Anthropic client.
    ...(sinkKind === 'webSink, translated'
      ? { policy: { downstream: anthropicDownstream('frames') } }
      : {}),
    attempt: ({ key, signal }: { key: { secret: string }; signal: AbortSignal }) => {
      if (order === 'before-output') host.abort()
      return fetch(upstreamUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key.secret}` },
        body,
        signal,
      })
    },
  })
  let relayed: Promise<RelayOutcome>
  let text: Promise<string | null>
  if (sinkKind !== 'nodeSink') {
    const { sink, response } = webSink()
    relayed = relay(options(sink))
    text = response.then((r) => r.text()).catch(() => null)
  } else {
    let resolveRelayed!: (outcome: Promise<RelayOutcome>) => void
    relayed = new Promise<Promise<RelayOutcome>>((resolve) => {
      resolveRelayed = resolve
    }).then((inner) => inner)
    const gateway = createServer((_req, res) => resolveRelayed(relay(options(nodeSink(res)))))
    const url = await listen(gateway)
    text = fetch(url, { method: 'POST', body })
      .then((r) => r.text())
      .catch(() => null)
  }
  const outcome = await relayed
  if (order === 'after-relay') host.abort()
  return { text: await text, outcome }
}

/** One request through `createResilientFetch`, its caller's signal aborted at the order's moment. */
async function fetchOnce(
  mode: Mode,
  order: Order,
  pool: KeyPool,
  hooks: RelayHooks,
): Promise<{ text: string | null; outcome: RelayOutcome }> {
  const upstreamUrl = await startUpstream()
  const caller = new AbortController()
  let resolveOutcome!: (outcome: RelayOutcome) => void
  const relayed = new Promise<RelayOutcome>((resolve) => {
    resolveOutcome = resolve
  })
  const resilient = createResilientFetch({
    pool,
    hooks,
    onOutcome: resolveOutcome,
    // The caller's signal is also the attempt's: abort as the attempt goes out.
    fetch: (input, init) => {
      if (order === 'before-output') caller.abort()
      return fetch(input, init)
    },
  })
  let text: string | null = null
  try {
    const response = await resilient(upstreamUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: requestBody(mode),
      signal: caller.signal,
    })
    const reader = (response.body as ReadableStream<Uint8Array>).getReader()
    let read = ''
    for (;;) {
      const { done: ended, value } = await reader.read()
      // The SDK's side: it aborts its request as soon as the body is read whole.
      if (ended && (order === 'after-last-write' || order === 'during-close')) caller.abort()
      if (ended) break
      if (order === 'mid-answer' && read === '') caller.abort()
      read += decoder.decode(value, { stream: true })
    }
    text = read
    if (order === 'close-resolved') caller.abort()
  } catch {
    text = null
  }
  const outcome = await relayed
  if (order === 'after-relay') caller.abort()
  return { text, outcome }
}

const redisPools = useRedisPools('finished-answer')
const pools = {
  memory: () => createMemoryKeyPool([{ id: 'key-a', secret: 'sk-finished-a-1234567890' }]),
  redis: () => redisPools.pool([{ id: 'key-a', secret: 'sk-finished-a-1234567890' }]),
} as const

type Entry =
  | 'relay + nodeSink'
  | 'relay + webSink'
  | 'relay + webSink, translated'
  | 'createResilientFetch'
const entries: readonly Entry[] = [
  'relay + nodeSink',
  'relay + webSink',
  'relay + webSink, translated',
  'createResilientFetch',
]

const cases = (['memory', 'redis'] as const).flatMap((pool) =>
  entries.flatMap((entry) =>
    (['stream', 'whole'] as const).flatMap((mode) =>
      orders
        .filter((order) => mode === 'stream' || order !== 'mid-answer')
        // A relay translates streams only.
        .filter(() => mode === 'stream' || entry !== 'relay + webSink, translated')
        .map((order) => ({ pool, entry, mode, order })),
    ),
  ),
)

describe('a finished answer is a success, whatever the host aborts afterwards', () => {
  it.each(cases)(
    '$entry, $mode, $pool pool: abort $order',
    async ({ pool: poolKind, entry, mode, order }) => {
      const pool = pools[poolKind]()
      const { hooks, outcomes, requestSpans } = telemetry()
      const { text, outcome } =
        entry === 'createResilientFetch'
          ? await fetchOnce(mode, order, pool, hooks)
          : await relayOnce(entry.replace('relay + ', '') as SinkKind, mode, order, pool, hooks)
      const want = expected(mode, order)
      expect(outcome.kind).toBe(want.kind)
      if (outcome.kind === 'committed') expect(outcome.end.kind).toBe(want.end)
      expect(outcome.ok).toBe(want.end === 'completed')
      // What the client read agrees: the whole answer exactly when the outcome says so.
      if (want.end === 'completed') {
        const end =
          mode === 'whole'
            ? '"finish_reason":"stop"'
            : entry === 'relay + webSink, translated'
              ? 'event: message_stop'
              : '[DONE]'
        expect(text).toContain(end)
      } else if (text !== null) {
        expect(text).not.toMatch(/\[DONE\]|message_stop/)
      }
      // The key's record: one lease, reported once, as the outcome says.
      await expect
        .poll(async () => {
          const [stats] = await pool.stats()
          return { inflight: stats?.inflight, outcomes: stats?.outcomes }
        })
        .toMatchObject({
          inflight: 0,
          outcomes: {
            success: want.key === 'success' ? 1 : 0,
            'client-gone': want.key === 'client-gone' ? 1 : 0,
          },
        })
      // The hooks heard the same outcome once; the request's span agrees.
      expect(outcomes).toHaveLength(1)
      expect(outcomes[0]).toBe(outcome)
      const spans = requestSpans()
      expect(spans).toHaveLength(1)
      const span = spans[0] as ReadableSpan
      expect(span.status.code === SpanStatusCode.ERROR).toBe(want.spanError)
      expect(span.attributes['stream_boundary.ok']).toBe(outcome.ok)
      if (!want.spanError) expect(span.attributes['error.type']).toBeUndefined()
    },
  )
})

/** README use 1's gateway (the upstream URL, the key and the hooks are the test's). */
async function startReadmeGateway(upstreamUrl: string, pool: KeyPool, hooks: RelayHooks) {
  // README use 1, as written there.
  const server = createServer(async (req, res) => {
    let body = ''
    for await (const chunk of req) body += chunk
    const client = new AbortController()
    res.once('close', () => client.abort())
    await relay({
      sink: nodeSink(res),
      adapter: openaiChat,
      pool,
      signal: client.signal,
      hooks,
      request: { url: upstreamUrl, body: JSON.parse(body) },
      policy: { peek: { firstOutputTimeoutMs: 20_000 } },
      attempt: ({ key, signal }) =>
        fetch(upstreamUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key.secret}` },
          body,
          signal,
          redirect: 'manual',
        }),
    })
  })
  return listen(server)
}

describe("README use 1's wiring", () => {
  it('a client that leaves mid-answer is client-gone, not the host aborting: no span in error', async () => {
    // An upstream that sends one chunk and holds: only the client's leaving can end it.
    const holding = await startChatUpstream([
      { frames: [chunk({ role: 'assistant', content: 'The whole ' })], end: 'hold' },
    ])
    cleanups.push(holding.close)
    const upstreamUrl = `${holding.url}/v1/chat/completions`
    const pool = createMemoryKeyPool([{ id: 'primary', secret: 'sk-readme-a-1234567890' }])
    const { hooks, outcomes, requestSpans } = telemetry()
    const url = await startReadmeGateway(upstreamUrl, pool, hooks)
    const client = new AbortController()
    const response = await fetch(url, {
      method: 'POST',
      body: requestBody('stream'),
      signal: client.signal,
    })
    const reader = (response.body as ReadableStream<Uint8Array>).getReader()
    await reader.read()
    client.abort()
    await expect.poll(() => outcomes.length).toBe(1)
    const [outcome] = outcomes
    expect(outcome?.kind === 'committed' && outcome.end.kind).toBe('client-gone')
    expect(outcome?.ok).toBe(false)
    const [stats] = await pool.stats()
    expect(stats?.outcomes).toMatchObject({ success: 0, 'client-gone': 1 })
    expect(requestSpans().map((span) => span.status.code)).toEqual([SpanStatusCode.UNSET])
  })

  it('five streams and five whole answers through the openai SDK: all completed, the key credited 10 times, no span in error', async () => {
    const upstreamUrl = await startUpstream()
    const pool = createMemoryKeyPool([{ id: 'primary', secret: 'sk-readme-a-1234567890' }])
    const { hooks, outcomes, requestSpans } = telemetry()
    // README use 1, as written there (the upstream URL, the key and the hooks are the test's).
    const server = createServer(async (req, res) => {
      let body = ''
      for await (const chunk of req) body += chunk
      const client = new AbortController()
      res.once('close', () => client.abort())
      await relay({
        sink: nodeSink(res),
        adapter: openaiChat,
        pool,
        signal: client.signal,
        hooks,
        request: { url: upstreamUrl, body: JSON.parse(body) },
        policy: { peek: { firstOutputTimeoutMs: 20_000 } },
        attempt: ({ key, signal }) =>
          fetch(upstreamUrl, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${key.secret}` },
            body,
            signal,
            redirect: 'manual',
          }),
      })
    })
    const url = await listen(server)
    const openai = new OpenAI({ apiKey: 'sk-client', baseURL: `${url}/v1`, maxRetries: 0 })
    const messages = [{ role: 'user' as const, content: 'hi' }]
    for (let index = 0; index < 5; index++) {
      const stream = await openai.chat.completions.create({
        model: 'gpt-test',
        messages,
        stream: true,
      })
      let text = ''
      for await (const part of stream) text += part.choices[0]?.delta?.content ?? ''
      expect(text).toBe(streamed)
      const whole = await openai.chat.completions.create({ model: 'gpt-test', messages })
      expect(whole.choices[0]?.message.content).toBe(streamed)
    }
    await expect.poll(() => outcomes.length).toBe(10)
    expect(
      outcomes.map((outcome) => (outcome.kind === 'committed' ? outcome.end.kind : outcome.kind)),
    ).toEqual(Array(10).fill('completed'))
    expect(outcomes.every((outcome) => outcome.ok)).toBe(true)
    const [stats] = await pool.stats()
    expect(stats?.outcomes).toMatchObject({ success: 10, 'client-gone': 0 })
    expect(stats?.inflight).toBe(0)
    const spans = requestSpans()
    expect(spans).toHaveLength(10)
    expect(spans.filter((span) => span.status.code === SpanStatusCode.ERROR)).toEqual([])
  })
})
