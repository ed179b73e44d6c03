/**
 * The spans' and metrics' instrumentation scope is `stream-boundary` at the package's version
 * (a constant the build writes in: tsup.config.ts `define`), not a scope without a version.
 */

import { readFileSync } from 'node:fs'
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'
import { describe, expect, it } from 'vitest'
import { createResilientFetch } from '../../src/index.js'
import { createRelayTelemetry } from '../../src/otel/index.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

class TestReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

const { version } = JSON.parse(
  readFileSync(new URL('../../package.json', import.meta.url), 'utf8'),
) as { version: string }

describe('stream-boundary/otel: instrumentation scope', () => {
  it("spans and metrics carry the scope stream-boundary at the package's version", async () => {
    const exporter = new InMemorySpanExporter()
    const tracerProvider = new BasicTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    })
    const reader = new TestReader()
    const meterProvider = new MeterProvider({ readers: [reader] })
    const telemetry = createRelayTelemetry({ tracerProvider, meterProvider })
    const upstream = createFaultyUpstream()
    let ended = false
    const fetch = createResilientFetch({
      fetch: upstream.fetch,
      hooks: telemetry.hooks,
      onOutcome: () => {
        ended = true
      },
    })
    const response = await fetch('https://api.test/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    })
    await response.text()
    await expect.poll(() => ended).toBe(true)
    const spans = exporter.getFinishedSpans()
    expect(spans.length).toBeGreaterThan(0)
    for (const span of spans) {
      expect(span.instrumentationScope).toMatchObject({ name: 'stream-boundary', version })
    }
    const { resourceMetrics } = await reader.collect()
    expect(resourceMetrics.scopeMetrics.map((metrics) => metrics.scope)).toContainEqual(
      expect.objectContaining({ name: 'stream-boundary', version }),
    )
  })
})
