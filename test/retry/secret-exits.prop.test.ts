import { AggregationTemporality, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createResilientFetch,
  type ForwardHeadersPolicy,
  openaiChat,
  type RelayOptions,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  webSink,
} from '../../src/index.js'
import { createRelayTelemetry } from '../../src/otel/index.js'
import { runs } from '../support/runs.js'

/**
 * Every exit is a redaction point (invariant 17): whatever shape a key has, and wherever the
 * upstream quotes it (a response header, an error frame before or after output, an answer's
 * id or model, a whole answer's body, an error body), it reaches no header, frame or body
 * the client gets, no outcome field, hook payload, span or metric attribute. On both front
 * ends, streaming and whole, with a pool and with the caller's own credential.
 */

const tail = (min: number, max: number) =>
  fc.stringMatching(new RegExp(`^[A-Za-z0-9_-]{${min},${max}}$`))

/** Key shapes of the providers, and arbitrary header-safe strings that are no English word. */
const secrets = fc.oneof(
  tail(20, 48).map((rest) => `sk-${rest}`),
  tail(20, 48).map((rest) => `sk-proj-${rest}`),
  tail(20, 48).map((rest) => `sk-ant-api03-${rest}`),
  fc.stringMatching(/^[0-9A-Za-z_-]{35}$/).map((rest) => `AIza${rest}`),
  fc
    .stringMatching(/^[\x21-\x7e]{8,40}$/)
    .filter((s) => /[^A-Za-z]/.test(s) && !s.includes('redacted')),
)

type Place =
  | 'x-request-id header'
  | 'request-id header'
  | 'echoed credential headers'
  | 'error frame before output'
  | 'error frame after output'
  | 'answer id'
  | 'answer model'
  | 'whole answer body'
  | '4xx error body'

/** Places that only a stream has. */
const streamOnly: readonly Place[] = ['error frame before output', 'error frame after output']

const places: readonly Place[] = [
  'x-request-id header',
  'request-id header',
  'echoed credential headers',
  'error frame before output',
  'error frame after output',
  'answer id',
  'answer model',
  'whole answer body',
  '4xx error body',
]

const sse = { 'content-type': 'text/event-stream' }
const json = { 'content-type': 'application/json' }

/** A whole Chat answer, streamed or not, with the given identity, headers and content. */
function answer(
  stream: boolean,
  options: { id?: string; model?: string; headers?: Record<string, string>; note?: string } = {},
): Response {
  const identity = { id: options.id ?? 'chatcmpl-1', model: options.model ?? 'm' }
  const extra = options.note === undefined ? {} : { system_fingerprint: options.note }
  if (stream) {
    const frame = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ ...identity, ...extra, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    return new Response(
      `${frame({ role: 'assistant', content: 'Hello' })}${frame({}, 'stop')}data: [DONE]\n\n`,
      { headers: { ...sse, ...options.headers } },
    )
  }
  const message = { role: 'assistant', content: 'Hello' }
  return new Response(
    JSON.stringify({
      ...identity,
      ...extra,
      object: 'chat.completion',
      choices: [{ index: 0, message, finish_reason: 'stop' }],
    }),
    { headers: { ...json, ...options.headers } },
  )
}

/** What the upstream answers to its `call`-th request (from 0), quoting `secret` at `place`. */
function upstreamAnswer(place: Place, secret: string, stream: boolean, call: number): Response {
  const errorFrame = `data: ${JSON.stringify({ error: { type: 'server_error', message: `key ${secret} failed` } })}\n\n`
  switch (place) {
    case 'x-request-id header':
      return answer(stream, { headers: { 'x-request-id': `req_${secret}` } })
    case 'request-id header':
      return answer(stream, { headers: { 'request-id': secret } })
    case 'echoed credential headers':
      return answer(stream, {
        headers: {
          authorization: `Bearer ${secret}`,
          'x-api-key': secret,
          'x-goog-api-key': secret,
          'api-key': secret,
          'set-cookie': `s=${secret}`,
        },
      })
    case 'error frame before output':
      // The first attempt fails with it; the retry answers.
      return call === 0 ? new Response(errorFrame, { headers: sse }) : answer(stream)
    case 'error frame after output': {
      const content = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'Hel' }, finish_reason: null }] })}\n\n`
      return new Response(`${content}${errorFrame}`, { headers: sse })
    }
    case 'answer id':
      return answer(stream, { id: `chatcmpl-${secret}` })
    case 'answer model':
      return answer(stream, { model: secret })
    case 'whole answer body':
      return answer(stream, { note: `fp_${secret}` })
    case '4xx error body':
      return new Response(
        JSON.stringify({ error: { type: 'invalid_request_error', message: `key ${secret}` } }),
        { status: 400, headers: { ...json, 'x-request-id': `req_${secret}` } },
      )
  }
}

class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE })
  }
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

/** Every string value in `value`, at any depth (object keys left out). */
function stringsOf(value: unknown): string[] {
  if (typeof value === 'string') return [value]
  if (typeof value !== 'object' || value === null) return []
  return Object.values(value).flatMap(stringsOf)
}

const exporter = new InMemorySpanExporter()
const reader = new TestReader()
const telemetry = createRelayTelemetry({
  tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
  meterProvider: new MeterProvider({ readers: [reader] }),
})

const chatUrl = 'https://api.test/v1/chat/completions'

interface Case {
  readonly secret: string
  readonly place: Place
  readonly front: 'relay' | 'fetch'
  readonly pooled: boolean
  readonly stream: boolean
  readonly forwardHeaders: ForwardHeadersPolicy | undefined
}

/** One request through the case's front end: what the client got, and everything recorded. */
async function run(c: Case): Promise<{ emitted: string[]; outcome: RelayOutcome }> {
  exporter.reset()
  const seen: unknown[] = []
  const record = (payload: unknown) => seen.push(payload)
  const outcomes: RelayOutcome[] = []
  let ended: () => void = () => {}
  const outcomeSeen = new Promise<void>((resolve) => {
    ended = resolve
  })
  const hooks = telemetry.withHooks({
    onAttempt: record,
    onRetry: record,
    onCommit: record,
    onGiveUp: record,
    onOutcome: (outcome) => {
      outcomes.push(outcome)
      record(outcome)
      ended()
    },
  })
  const policy: RelayPolicy = {
    maxAttempts: 2,
    backoff: { baseMs: 1, maxMs: 2 },
    ...(c.forwardHeaders === undefined ? {} : { forwardHeaders: c.forwardHeaders }),
  }
  const pool = c.pooled ? createMemoryKeyPool([{ id: 'only', secret: c.secret }]) : undefined
  let call = 0
  const upstream = () => upstreamAnswer(c.place, c.secret, c.stream, call++)
  const body = JSON.stringify({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    stream: c.stream,
  })
  let response: Response
  if (c.front === 'relay') {
    const { sink, response: answered } = webSink()
    void relay({
      sink,
      adapter: openaiChat,
      stream: c.stream,
      policy,
      hooks,
      // Without a pool, the caller says which secret its attempts carry.
      ...(pool === undefined ? { secrets: [c.secret] } : { pool }),
      attempt: async () => upstream(),
    } as RelayOptions)
    response = await answered
  } else {
    const resilient = createResilientFetch({
      policy,
      hooks,
      fetch: async () => upstream(),
      ...(pool === undefined ? {} : { pool }),
    })
    response = await resilient(chatUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(pool === undefined ? { authorization: `Bearer ${c.secret}` } : {}),
      },
      body,
    })
  }
  const text = await response.text()
  await outcomeSeen
  expect(outcomes).toHaveLength(1)
  const { resourceMetrics } = await reader.collect()
  const metricAttributes = resourceMetrics.scopeMetrics
    .flatMap((scope) => scope.metrics)
    .flatMap((metric) => metric.dataPoints.map((point) => point.attributes))
  const spanAttributes = exporter.getFinishedSpans().map((span) => span.attributes)
  return {
    emitted: [
      text,
      ...[...response.headers].map(([name, value]) => `${name}: ${value}`),
      ...stringsOf(seen),
      ...[...spanAttributes, ...metricAttributes].flatMap(stringsOf),
    ],
    outcome: outcomes[0] as RelayOutcome,
  }
}

const cases: fc.Arbitrary<Case> = fc
  .record({
    secret: secrets,
    place: fc.constantFrom(...places),
    front: fc.constantFrom('relay' as const, 'fetch' as const),
    pooled: fc.boolean(),
    stream: fc.boolean(),
    forwardHeaders: fc.constantFrom<ForwardHeadersPolicy | undefined>(undefined, () => true, {
      allow: [/./],
    }),
  })
  .map((c) => (streamOnly.includes(c.place) ? { ...c, stream: true } : c))

describe('redaction at every exit', () => {
  it(
    'no leased secret appears in any header, frame, body, outcome field or span attribute the library emits, for random secret shapes quoted anywhere by the upstream',
    async () => {
      await fc.assert(
        fc.asyncProperty(cases, async (c) => {
          const { emitted, outcome } = await run(c)
          const escaped = JSON.stringify(c.secret).slice(1, -1)
          for (const text of emitted) {
            expect(text).not.toContain(c.secret)
            expect(text).not.toContain(escaped)
          }
          // The request still ends as the upstream made it end: redaction changes words only.
          const expected = c.place === '4xx error body' ? 'failed' : 'committed'
          expect(outcome.kind).toBe(expected)
        }),
        { numRuns: runs(150) },
      )
      // About 12 ms a run; the deep run's 3,750 need more than the default 30 s.
    },
    runs(150) * 100,
  )
})
