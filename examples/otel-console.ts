/**
 * OpenTelemetry for relayed requests, printed to the console: the OTel SDK's tracer and meter
 * providers with console exporters, `stream-boundary/otel`'s hooks on `createResilientFetch`,
 * and two requests to the embedded fault-injecting upstream (one clean, one that needs a
 * retry). In a real app, register your SDK's providers globally (the OTel Node SDK does) and
 * call `createRelayTelemetry()` with no options.
 *
 *   node --import tsx examples/otel-console.ts
 */

import {
  AggregationTemporality,
  ConsoleMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  ConsoleSpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'
import { createResilientFetch } from 'stream-boundary'
import { createRelayTelemetry } from 'stream-boundary/otel'
import { createFaultyUpstream } from 'stream-boundary/testing'

const tracerProvider = new BasicTracerProvider({
  spanProcessors: [new SimpleSpanProcessor(new ConsoleSpanExporter())],
})
const reader = new PeriodicExportingMetricReader({
  exporter: new ConsoleMetricExporter({ temporalitySelector: () => AggregationTemporality.DELTA }),
  exportIntervalMillis: 60_000,
})
const meterProvider = new MeterProvider({ readers: [reader] })
const telemetry = createRelayTelemetry({ tracerProvider, meterProvider })

const upstream = createFaultyUpstream({ scenarios: { clean: ['ok'], flaky: ['empty', 'ok'] } })
const fetch = createResilientFetch({ fetch: upstream.fetch, hooks: telemetry.hooks })

for (const scenario of ['clean', 'flaky']) {
  const response = await fetch('https://api.openai.com/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-fault-scenario': scenario },
    body: JSON.stringify({
      model: 'gpt-4o-mini',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Hello' }],
    }),
  })
  await response.text()
}
// Spans print as each request ends; metrics at the flush.
await meterProvider.forceFlush()
await meterProvider.shutdown()
await tracerProvider.shutdown()
