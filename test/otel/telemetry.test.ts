import { SpanKind, SpanStatusCode } from '@opentelemetry/api'
import {
  AggregationTemporality,
  type DataPoint,
  type Histogram,
  MeterProvider,
  MetricReader,
} from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createHedging,
  createMemoryKeyPool,
  createResilientFetch,
  openaiChat,
  openaiChatWith,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  type StreamAdapter,
  webSink,
} from '../../src/index.js'
import { createRelayTelemetry } from '../../src/otel/index.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { createRecordingSink } from '../../src/testing/index.js'
import { runs } from '../support/runs.js'

/**
 * `stream-boundary/otel` with the OpenTelemetry SDK's in-memory span exporter and a metric
 * reader: a span per request and one per attempt, named and attributed by the GenAI
 * conventions, and the GenAI client metrics with the library's own, for a clean stream, a
 * retried empty stream, a hedged request, a give-up, a client that left and a non-streaming
 * request. No secret ever reaches a span or a metric.
 */

class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE })
  }
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

function setup() {
  const exporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  })
  const reader = new TestReader()
  const meterProvider = new MeterProvider({ readers: [reader] })
  const telemetry = createRelayTelemetry({ tracerProvider, meterProvider })
  const metrics = async () => {
    const { resourceMetrics } = await reader.collect()
    return resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics)
  }
  /** The data points of one metric, with their attributes. */
  const points = async (name: string) =>
    (await metrics()).find((metric) => metric.descriptor.name === name)?.dataPoints ?? []
  return { telemetry, exporter, spans: () => exporter.getFinishedSpans(), metrics, points }
}

const chat = 'https://api.test/v1/chat/completions'

/** One request through `createResilientFetch` over the faulty upstream, with telemetry. */
async function fetchThrough(
  telemetry: ReturnType<typeof createRelayTelemetry>,
  scenario: Scenario,
  options: { stream?: boolean; policy?: RelayPolicy; adapter?: StreamAdapter } = {},
): Promise<RelayOutcome> {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  let outcome: RelayOutcome | undefined
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    hooks: telemetry.hooks,
    ...(options.adapter === undefined ? {} : { adapter: options.adapter }),
    onOutcome: (ended) => {
      outcome = ended
    },
    policy: { backoff: { baseMs: 1, maxMs: 2 }, ...options.policy },
  })
  const response = await fetch(chat, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
    body: JSON.stringify({
      model: 'gpt-test',
      stream: options.stream ?? true,
      messages: [{ role: 'user', content: 'hi' }],
    }),
  })
  await response.text()
  await expect.poll(() => outcome).toBeDefined()
  return outcome as RelayOutcome
}

/** The request span and its attempt spans, children first in attempt order. */
function tree(spans: readonly ReadableSpan[]) {
  const request = spans.find((span) => span.attributes['stream_boundary.outcome'] !== undefined)
  if (request === undefined) throw new Error('no request span')
  const attempts = spans
    .filter((span) => span.parentSpanContext?.spanId === request.spanContext().spanId)
    .sort(
      (a, b) =>
        Number(a.attributes['stream_boundary.attempt.number']) -
        Number(b.attributes['stream_boundary.attempt.number']),
    )
  return { request, attempts }
}

const sum = (point: DataPoint<unknown> | undefined) => (point?.value as Histogram | undefined)?.sum
const count = (point: DataPoint<unknown> | undefined) =>
  (point?.value as Histogram | undefined)?.count

describe('stream-boundary/otel', () => {
  it('a clean stream: one CLIENT span named "chat gpt-test" with the GenAI attributes, one attempt span under it, and the GenAI metrics', async () => {
    const { telemetry, spans, points } = setup()
    await fetchThrough(telemetry, ['ok'])
    const { request, attempts } = tree(spans())
    expect(request.name).toBe('chat gpt-test')
    expect(request.kind).toBe(SpanKind.CLIENT)
    expect(request.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'gpt-test',
      'gen_ai.response.model': 'faulty-model',
      'gen_ai.response.id': 'chatcmpl-faulty',
      'gen_ai.response.finish_reasons': ['stop'],
      'gen_ai.usage.input_tokens': 10,
      'gen_ai.usage.output_tokens': 12,
      'stream_boundary.outcome': 'committed',
      'stream_boundary.result': 'completed',
      'stream_boundary.end': 'completed',
      'stream_boundary.attempts': 1,
    })
    expect(request.attributes['error.type']).toBeUndefined()
    expect(request.status.code).toBe(SpanStatusCode.UNSET)
    expect(attempts).toHaveLength(1)
    expect(attempts[0]?.name).toBe('chat gpt-test attempt 1')
    expect(attempts[0]?.attributes).toMatchObject({
      'stream_boundary.attempt.result': 'committed',
      'http.response.status_code': 200,
      'gen_ai.usage.output_tokens': 12,
    })
    const duration = await points('gen_ai.client.operation.duration')
    expect(count(duration[0])).toBe(1)
    expect(duration[0]?.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'gpt-test',
    })
    const tokens = await points('gen_ai.client.token.usage')
    const byType = (type: string) =>
      tokens.find((point) => point.attributes['gen_ai.token.type'] === type)
    expect(sum(byType('input'))).toBe(10)
    expect(sum(byType('output'))).toBe(12)
    expect(count((await points('gen_ai.client.operation.time_to_first_chunk'))[0])).toBe(1)
    expect(sum((await points('stream_boundary.attempts'))[0])).toBe(1)
  })

  it('a retried empty stream: two attempt spans, the first an error with its reason, and one retry counted by reason', async () => {
    const { telemetry, spans, points } = setup()
    await fetchThrough(telemetry, ['empty', 'ok'])
    const { request, attempts } = tree(spans())
    expect(request.attributes['stream_boundary.attempts']).toBe(2)
    expect(attempts.map((span) => span.attributes['stream_boundary.attempt.result'])).toEqual([
      'empty',
      'committed',
    ])
    expect(attempts[0]?.attributes['error.type']).toBe('empty')
    expect(attempts[0]?.status.code).toBe(SpanStatusCode.ERROR)
    // The attempts' own times: the second starts after the first.
    const start = (span: ReadableSpan | undefined) => span?.startTime[0] ?? 0
    expect(start(attempts[1]) * 1e9 + (attempts[1]?.startTime[1] ?? 0)).toBeGreaterThanOrEqual(
      start(attempts[0]) * 1e9 + (attempts[0]?.startTime[1] ?? 0),
    )
    const retries = await points('stream_boundary.retries')
    expect(
      retries.map((point) => [point.attributes['stream_boundary.reason'], point.value]),
    ).toEqual([['empty', 1]])
  })

  it('a continuation after a cut: an event on the request span with its result, cause, key and usage; the span counts them', async () => {
    const { telemetry, spans } = setup()
    const outcome = await fetchThrough(telemetry, ['partial-then-cut', 'ok'], {
      policy: { continueAfterCut: true },
      adapter: openaiChatWith({ continuation: 'vllm-continue' }),
    })
    expect(outcome).toMatchObject({ end: { kind: 'completed' } })
    const { request } = tree(spans())
    expect(request.attributes['stream_boundary.continuations']).toBe(1)
    expect(request.attributes['stream_boundary.continuations.spliced']).toBe(1)
    const events = request.events.filter((event) => event.name === 'stream_boundary.continuation')
    expect(events).toHaveLength(1)
    expect(events[0]?.attributes).toMatchObject({
      'stream_boundary.continuation.result': 'spliced',
      'stream_boundary.continuation.cause': 'partial-eof',
      'stream_boundary.continuation.received_chars': 20,
      'stream_boundary.continuation.attempts': 1,
      'gen_ai.usage.output_tokens': 12,
    })
    expect(JSON.stringify(spans().map((span) => [span.attributes, span.events]))).not.toMatch(/sk-/)
  })

  it("a continuation after a cut: the cut attempt's span has its own upstream's usage, the request span the sum", async () => {
    const { telemetry, spans } = setup()
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    const outcome = await relay({
      sink: createRecordingSink(),
      adapter: anthropicMessages,
      hooks: telemetry.hooks,
      request: {
        url: 'https://api.test/v1/messages',
        body: {
          model: 'c',
          stream: true,
          max_tokens: 64,
          messages: [{ role: 'user', content: 'hi' }],
        },
      },
      policy: { continueAfterCut: true },
      attempt: ({ signal, request }) =>
        upstream.fetch(request?.url ?? '', {
          method: 'POST',
          headers: { 'x-fault-scenario': 's' },
          body: JSON.stringify(request?.body),
          signal,
        }),
    })
    expect(outcome).toMatchObject({ end: { kind: 'completed' } })
    await expect.poll(() => spans().length).toBeGreaterThan(1)
    const { request, attempts } = tree(spans())
    expect(attempts).toHaveLength(1)
    // Anthropic's message_start of the cut stream: 10 in, 1 out; the continuation: 10 in, 12 out.
    expect(attempts[0]?.attributes).toMatchObject({
      'gen_ai.usage.input_tokens': 10,
      'gen_ai.usage.output_tokens': 1,
    })
    expect(request.attributes).toMatchObject({
      'gen_ai.usage.input_tokens': 20,
      'gen_ai.usage.output_tokens': 13,
    })
  })

  it('a give-up: the span is an error with error.type and the status, and the give-up is counted', async () => {
    const { telemetry, spans, points } = setup()
    await fetchThrough(telemetry, ['overloaded'], { policy: { maxAttempts: 2 } })
    const { request, attempts } = tree(spans())
    expect(request.status.code).toBe(SpanStatusCode.ERROR)
    expect(request.attributes).toMatchObject({
      'error.type': 'status-529',
      'http.response.status_code': 529,
      'stream_boundary.outcome': 'failed',
      'stream_boundary.result': 'failed',
    })
    expect(attempts).toHaveLength(2)
    const giveUps = await points('stream_boundary.give_ups')
    expect(giveUps[0]?.attributes).toMatchObject({
      'http.response.status_code': 529,
      'stream_boundary.reason': 'status-529',
    })
    expect(giveUps[0]?.value).toBe(1)
    const duration = await points('gen_ai.client.operation.duration')
    expect(duration[0]?.attributes['error.type']).toBe('status-529')
  })

  it('a non-streaming request: the same span, with the usage and id of the whole answer', async () => {
    const { telemetry, spans } = setup()
    const outcome = await fetchThrough(telemetry, ['ok'], { stream: false })
    expect(outcome).toMatchObject({ kind: 'committed', mode: 'non-streaming' })
    const { request } = tree(spans())
    expect(request.attributes).toMatchObject({
      'stream_boundary.mode': 'non-streaming',
      'gen_ai.usage.input_tokens': 10,
      'gen_ai.usage.output_tokens': 12,
      'gen_ai.response.id': 'chatcmpl-faulty',
    })
  })

  it('a client that left: the span says so, and is no error', async () => {
    const { telemetry, spans } = setup()
    const upstream = createFaultyUpstream({
      scenarios: { s: [{ kind: 'slow-drip', delayMs: 50 }] },
    })
    const { sink, response } = webSink()
    const outcome = relay({
      sink,
      adapter: openaiChat,
      hooks: telemetry.hooks,
      attempt: ({ signal }) =>
        upstream.fetch(chat, {
          method: 'POST',
          headers: { 'x-fault-scenario': 's' },
          body: '{"model":"gpt-test","stream":true}',
          signal,
        }),
    })
    const reader = (await response).body?.getReader()
    await reader?.read()
    await reader?.cancel()
    await outcome
    const { request } = tree(spans())
    expect(request.attributes['stream_boundary.end']).toBe('client-gone')
    expect(request.attributes['error.type']).toBeUndefined()
    expect(request.status.code).toBe(SpanStatusCode.UNSET)
  })

  it('a hedged request: the hedge is a span of its own with hedge_of, and hedges started and won are counted', async () => {
    const { telemetry, spans, points } = setup()
    const upstream = createFaultyUpstream({
      scenarios: { slow: ['headers-then-hang'], fast: ['ok'] },
    })
    const { sink, response } = webSink()
    const outcome = relay({
      sink,
      adapter: openaiChat,
      pool: createMemoryKeyPool([
        { id: 'slow', secret: 'sk-slow-0123456789' },
        { id: 'fast', secret: 'sk-fast-0123456789' },
      ]),
      hooks: telemetry.hooks,
      policy: { hedge: createHedging({ afterMs: 20, budget: 1 }) },
      attempt: ({ key, signal }) =>
        upstream.fetch(chat, {
          method: 'POST',
          headers: { 'x-fault-scenario': key.id },
          body: '{"model":"gpt-test","stream":true}',
          signal,
        }),
    })
    await (await response).text()
    expect(await outcome).toMatchObject({ kind: 'committed', hedges: { wonByHedge: true } })
    const { request, attempts } = tree(spans())
    expect(request.attributes).toMatchObject({
      'stream_boundary.hedges.started': 1,
      'stream_boundary.hedges.won': true,
    })
    expect(attempts.map((span) => span.attributes['stream_boundary.attempt.result'])).toEqual([
      'hedge-lost',
      'committed',
    ])
    expect(attempts[1]?.attributes['stream_boundary.attempt.hedge_of']).toBe(1)
    const hedges = await points('stream_boundary.hedges')
    const of = (kind: string) =>
      hedges.find((point) => point.attributes['stream_boundary.hedge'] === kind)?.value
    expect([of('started'), of('won')]).toEqual([1, 1])
  })

  it('key state changes are counted by state and reason', async () => {
    const { telemetry, points } = setup()
    const pool = createMemoryKeyPool([{ id: 'a', secret: 'sk-a-0123456789' }], {
      onKeyState: telemetry.onKeyState,
    })
    pool.disable('a')
    const changes = await points('stream_boundary.key.state_changes')
    expect(changes[0]?.attributes).toMatchObject({
      'stream_boundary.key.id': 'a',
      'stream_boundary.key.state': 'disabled',
      'stream_boundary.reason': 'operator',
    })
  })

  it('options are checked, and content is recorded only when asked for', async () => {
    expect(() => createRelayTelemetry({ tracerProvide: undefined } as never)).toThrow(
      /unknown option "tracerProvide"; did you mean "tracerProvider"\?/,
    )
    const exporter = new InMemorySpanExporter()
    const telemetry = createRelayTelemetry({
      tracerProvider: new BasicTracerProvider({
        spanProcessors: [new SimpleSpanProcessor(exporter)],
      }),
      content: () => ({ input: 'hi', output: 'hello' }),
    })
    await fetchThrough(telemetry, ['ok'])
    const { request } = tree(exporter.getFinishedSpans())
    expect(request.attributes['gen_ai.input.messages']).toBe('hi')
    expect(request.attributes['gen_ai.output.messages']).toBe('hello')
    // Without `content`, none.
    const plain = setup()
    await fetchThrough(plain.telemetry, ['ok'])
    expect(tree(plain.spans()).request.attributes['gen_ai.input.messages']).toBeUndefined()
  })

  it.each([
    [
      'throws',
      () => {
        throw new Error('the host broke')
      },
    ],
    ['returns garbage', () => ({ input: 42, output: null }) as never],
  ] as const)(
    'a content function that %s still leaves the request its span and metrics, without content',
    async (_, content) => {
      const exporter = new InMemorySpanExporter()
      const reader = new TestReader()
      const telemetry = createRelayTelemetry({
        tracerProvider: new BasicTracerProvider({
          spanProcessors: [new SimpleSpanProcessor(exporter)],
        }),
        meterProvider: new MeterProvider({ readers: [reader] }),
        content,
      })
      await fetchThrough(telemetry, ['ok'])
      const { request, attempts } = tree(exporter.getFinishedSpans())
      expect(request.attributes['gen_ai.input.messages']).toBeUndefined()
      expect(request.attributes['gen_ai.output.messages']).toBeUndefined()
      expect(attempts).toHaveLength(1)
      const { resourceMetrics } = await reader.collect()
      const names = resourceMetrics.scopeMetrics.flatMap((scope) =>
        scope.metrics.map((metric) => metric.descriptor.name),
      )
      expect(names).toContain('gen_ai.client.operation.duration')
    },
  )

  it('no secret in any span or metric, whatever the keys and whatever the upstream quotes back', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.stringMatching(/^[A-Za-z0-9_-]{16,40}$/),
        fc.constantFrom('status', 'frame'),
        async (suffix, where) => {
          const secret = `sk-${suffix}`
          const { telemetry, spans, metrics } = setup()
          const { sink, response } = webSink()
          const quoted = `Incorrect API key provided: ${secret}`
          const outcome = relay({
            sink,
            adapter: openaiChat,
            pool: createMemoryKeyPool([{ id: 'k1', secret }]),
            hooks: telemetry.hooks,
            policy: { maxAttempts: 1, passThroughErrors: false },
            attempt: async () =>
              where === 'status'
                ? new Response(
                    JSON.stringify({ error: { message: quoted, type: 'server_error' } }),
                    {
                      status: 500,
                    },
                  )
                : new Response(
                    `data: ${JSON.stringify({ choices: [{ delta: { content: 'x' } }] })}\n\ndata: ${JSON.stringify({ error: { message: quoted, type: 'server_error' } })}\n\n`,
                    { headers: { 'content-type': 'text/event-stream' } },
                  ),
          })
          await (await response).text()
          await outcome
          const recorded = JSON.stringify({
            spans: spans().map((span) => ({
              name: span.name,
              attributes: span.attributes,
              status: span.status,
              events: span.events,
            })),
            metrics: await metrics(),
          })
          expect(recorded).toContain('k1')
          expect(recorded).not.toContain(secret)
        },
      ),
      { numRuns: runs(30) },
    )
  })

  it("each measurement carries its own request's protocol and models, however models repeat or look alike", async () => {
    // Recorded as called: the instrument, the value and the very attribute set handed over.
    const calls: { name: string; attributes: Record<string, unknown> }[] = []
    const instrument = (name: string) => {
      const take = (_value: number, attributes: Record<string, unknown> = {}) => {
        calls.push({ name, attributes: { ...attributes } })
      }
      return { record: take, add: take }
    }
    const meterProvider = {
      getMeter: () => ({ createHistogram: instrument, createCounter: instrument }),
    } as unknown as MeterProvider
    const telemetry = createRelayTelemetry({
      tracerProvider: new BasicTracerProvider(),
      meterProvider,
    })
    // Names that a careless key would confuse: empty, separators, prefixes of one another.
    const model = fc.option(
      fc.constantFrom('', 'x', 'xx', 'a:', '1:a', '-', 'a\u0000b', 'gpt-4o'),
      {
        nil: undefined,
      },
    )
    const request = fc.record({
      adapter: fc.constantFrom(openaiChat, anthropicMessages),
      model,
      responseModel: model,
      fails: fc.boolean(),
    })
    await fc.assert(
      fc.asyncProperty(fc.array(request, { minLength: 1, maxLength: 12 }), async (requests) => {
        for (const each of requests) {
          calls.length = 0
          const { sink, response } = webSink()
          const anthropic = each.adapter === anthropicMessages
          const frames = anthropic
            ? [
                {
                  type: 'message_start',
                  message: {
                    id: 'msg_1',
                    model: each.responseModel,
                    usage: { input_tokens: 3, output_tokens: 1 },
                  },
                },
                {
                  type: 'content_block_delta',
                  index: 0,
                  delta: { type: 'text_delta', text: 'hi' },
                },
                {
                  type: 'message_delta',
                  delta: { stop_reason: 'end_turn' },
                  usage: { output_tokens: 2 },
                },
                { type: 'message_stop' },
              ]
            : [
                {
                  id: 'c1',
                  model: each.responseModel,
                  choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: 'stop' }],
                  usage: { prompt_tokens: 3, completion_tokens: 2 },
                },
              ]
          const body = frames.map((frame) => `data: ${JSON.stringify(frame)}\n\n`).join('')
          const outcome = relay({
            sink,
            adapter: each.adapter,
            pool: createMemoryKeyPool([{ id: 'k1', secret: 'sk-property-not-real' }]),
            hooks: telemetry.hooks,
            policy: { maxAttempts: 1 },
            request: {
              url: anthropic ? 'https://api.test/v1/messages' : chat,
              body: { ...(each.model === undefined ? {} : { model: each.model }), stream: true },
            },
            attempt: async () =>
              each.fails
                ? new Response('{"error":{"message":"down"}}', { status: 503 })
                : new Response(body, { headers: { 'content-type': 'text/event-stream' } }),
          })
          await (await response).text()
          const ended = await outcome
          expect(calls.length).toBeGreaterThan(0)
          const responseModel = ended.kind === 'committed' ? ended.response?.model : undefined
          // The models did reach the outcome (an empty one is no model).
          if (!each.fails && each.responseModel) expect(responseModel).toBe(each.responseModel)
          if (each.model) expect(ended.model).toBe(each.model)
          for (const call of calls) {
            expect(call.attributes['gen_ai.provider.name']).toBe(anthropic ? 'anthropic' : 'openai')
            expect(call.attributes['gen_ai.request.model']).toBe(ended.model)
            expect(call.attributes['gen_ai.response.model']).toBe(responseModel)
          }
          const tokens = calls.filter((call) => call.name === 'gen_ai.client.token.usage')
          expect(tokens.map((call) => call.attributes['gen_ai.token.type'])).toEqual(
            each.fails ? [] : ['input', 'output'],
          )
        }
      }),
      { numRuns: runs(40) },
    )
  })
})
