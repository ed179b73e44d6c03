/**
 * The example gateway (`node:http` attempts) in a process of its own for the OpenTelemetry
 * benchmark, set up the way a user runs it:
 * - `off`: no OpenTelemetry at all;
 * - `sdk`: the OTel SDK registered (`NodeTracerProvider` with the `AsyncHooksContextManager`
 *   and a `BatchSpanProcessor`, a `MeterProvider`) but no `stream-boundary/otel` hooks: what
 *   the SDK costs a process by itself;
 * - `async-hooks`: the same, with `stream-boundary/otel` recording every span and metric;
 * - `als`: the same with the `AsyncLocalStorageContextManager` (`NodeTracerProvider`'s default).
 * Spans go to an exporter that drops them, metrics to a periodic reader whose exporter drops
 * them. Prints its URL on IPC, answers `cpu` with `process.cpuUsage()`.
 */

import { metrics } from '@opentelemetry/api'
import {
  AsyncHooksContextManager,
  AsyncLocalStorageContextManager,
} from '@opentelemetry/context-async-hooks'
import {
  AggregationTemporality,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node'
import { startGateway } from '../examples/node-http-gateway.js'
import { createRelayTelemetry } from '../src/otel/index.js'

const modes = ['off', 'sdk', 'async-hooks', 'als'] as const
type Mode = (typeof modes)[number]
const [mode, upstream] = process.argv.slice(2) as [Mode | undefined, string | undefined]
if (upstream === undefined || mode === undefined || !modes.includes(mode)) {
  throw new Error(`usage: otel-gateway.ts ${modes.join('|')} <upstream url>`)
}

/** Spans the exporter was handed (a check that the SDK's whole path ran). */
let exported = 0
let flush = async () => {}

function registerSdk(manager: 'async-hooks' | 'als'): void {
  const tracerProvider = new NodeTracerProvider({
    spanProcessors: [
      new BatchSpanProcessor({
        export: (spans, done) => {
          exported += spans.length
          done({ code: 0 })
        },
        shutdown: async () => {},
      }),
    ],
  })
  const contextManager =
    manager === 'async-hooks'
      ? new AsyncHooksContextManager().enable()
      : new AsyncLocalStorageContextManager().enable()
  tracerProvider.register({ contextManager })
  flush = () => tracerProvider.forceFlush()
  const meterProvider = new MeterProvider({
    readers: [
      new PeriodicExportingMetricReader({
        exporter: {
          export: (_metrics, done) => done({ code: 0 }),
          forceFlush: async () => {},
          shutdown: async () => {},
          selectAggregationTemporality: () => AggregationTemporality.CUMULATIVE,
        },
        exportIntervalMillis: 10_000,
      }),
    ],
  })
  metrics.setGlobalMeterProvider(meterProvider)
}

if (mode !== 'off') registerSdk(mode === 'als' ? 'als' : 'async-hooks')
// The global providers, as `createRelayTelemetry()` reads them by default.
const telemetry = mode === 'async-hooks' || mode === 'als' ? createRelayTelemetry() : undefined

const gateway = await startGateway({
  openaiBaseUrl: `${upstream}/v1`,
  anthropicBaseUrl: upstream,
  keys: [{ id: 'bench', secret: 'sk-bench-not-real' }],
  policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
  upstreamClient: 'node:http',
  ...(telemetry === undefined ? {} : { hooks: telemetry.hooks, onKeyState: telemetry.onKeyState }),
})

process.send?.({ url: gateway.url })
process.on('message', (message) => {
  if (message === 'cpu') process.send?.({ cpu: process.cpuUsage() })
  if (message === 'spans') void flush().then(() => process.send?.({ spans: exported }))
  if (message === 'exit') process.exit(0)
})
