/**
 * Where a relayed request's CPU goes, in process (no HTTP): `relay()` over an upstream that
 * yields N frames into a sink that takes every write at once, against the same frames merely
 * iterated and written (the floor), at two stream lengths, so each side's cost splits into a
 * fixed part per request and a part per frame (a straight line through the two). Beside it,
 * the cost on this runtime of the objects a relay makes per request and cannot do without
 * (an AbortSignal for the attempt function, a listener on it, a timer, `Headers` for the head).
 */

import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { createMemoryKeyPool, type DownstreamSink, openaiChat, relay } from '../src/index.js'
import { iterableResponse } from '../src/node.js'
import { createRelayTelemetry } from '../src/otel/index.js'
import { chunkPerFrame, openaiChatStream } from './inputs.js'

interface Line {
  /** CPU microseconds per request that do not depend on its length. */
  readonly perRequestUs: number
  /** CPU microseconds per relayed frame. */
  readonly perFrameUs: number
}

export interface PerRequestResult {
  readonly shortFrames: number
  readonly longFrames: number
  readonly floor: Line
  readonly relay: Line
  /** What the library adds per request and per frame over the floor. */
  readonly added: Line
  /** `relay()` with `stream-boundary/otel` recording into the OTel SDK (spans and metrics). */
  readonly telemetry: Line
  /** What the telemetry adds over the library's own cost, as a share of it (per request). */
  readonly telemetryShareOfAdded: number
  /** Microseconds per operation on this runtime. */
  readonly primitives: Readonly<Record<string, number>>
}

function nullSink(): DownstreamSink {
  return {
    signal: new AbortController().signal,
    sendHead() {},
    write() {},
    close() {},
    abort() {},
  }
}

async function* yieldAll(chunks: readonly Uint8Array[]): AsyncGenerator<Uint8Array> {
  for (const chunk of chunks) yield chunk
}

const pool = createMemoryKeyPool([{ id: 'bench', secret: 'sk-bench-not-real' }])
const headers = { 'content-type': 'text/event-stream' }

function relayOnce(chunks: readonly Uint8Array[]): Promise<unknown> {
  return relay({
    sink: nullSink(),
    pool,
    adapter: openaiChat,
    policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
    attempt: async () => iterableResponse(yieldAll(chunks), { headers }),
  })
}

/** A metric reader nobody collects from: the instruments still record into the SDK. */
class IdleReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

// Spans are made, ended and handed to an exporter that drops them: the SDK's whole path.
const telemetry = createRelayTelemetry({
  tracerProvider: new BasicTracerProvider({
    spanProcessors: [
      new SimpleSpanProcessor({
        export: (_spans, done) => done({ code: 0 }),
        shutdown: async () => {},
      }),
    ],
  }),
  meterProvider: new MeterProvider({ readers: [new IdleReader()] }),
})

function relayWithTelemetryOnce(chunks: readonly Uint8Array[]): Promise<unknown> {
  return relay({
    sink: nullSink(),
    pool,
    adapter: openaiChat,
    hooks: telemetry.hooks,
    policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
    attempt: async () => iterableResponse(yieldAll(chunks), { headers }),
  })
}

async function floorOnce(chunks: readonly Uint8Array[]): Promise<unknown> {
  const sink = nullSink()
  sink.sendHead(200, new Headers(headers))
  for await (const chunk of yieldAll(chunks)) sink.write(chunk)
  return sink.close()
}

/** CPU microseconds per request, `requests` of them 32 at a time, median of `rounds`. */
async function cpuPerRequest(
  run: (chunks: readonly Uint8Array[]) => Promise<unknown>,
  chunks: readonly Uint8Array[],
  requests: number,
  rounds: number,
): Promise<number> {
  const samples: number[] = []
  for (let round = 0; round < rounds; round++) {
    ;(globalThis as { gc?: () => void }).gc?.()
    const before = process.cpuUsage()
    for (let done = 0; done < requests; done += 32) {
      await Promise.all(Array.from({ length: Math.min(32, requests - done) }, () => run(chunks)))
    }
    const used = process.cpuUsage(before)
    samples.push((used.user + used.system) / requests)
  }
  samples.sort((a, b) => a - b)
  return samples[Math.floor(samples.length / 2)] as number
}

function line(short: number, long: number, shortFrames: number, longFrames: number): Line {
  const perFrameUs = (long - short) / (longFrames - shortFrames)
  return { perFrameUs, perRequestUs: short - perFrameUs * shortFrames }
}

/** Microseconds per call of `make`, over `n` calls, median of 5 runs. */
function timeEach(n: number, make: () => unknown): number {
  const samples: number[] = []
  let keep: unknown
  for (let run = 0; run < 5; run++) {
    const started = performance.now()
    for (let i = 0; i < n; i++) keep = make()
    samples.push(((performance.now() - started) * 1000) / n)
  }
  if (keep === Symbol.for('never')) console.log(keep)
  samples.sort((a, b) => a - b)
  return samples[2] as number
}

export async function benchPerRequest(options: {
  requests: number
  rounds: number
  shortFrames: number
  longFrames: number
}): Promise<PerRequestResult> {
  const { shortFrames, longFrames } = options
  const short = chunkPerFrame(openaiChatStream(shortFrames - 2)).slice(1)
  const long = chunkPerFrame(openaiChatStream(longFrames - 2)).slice(1)
  // Warm-up: the JIT sees both sides first.
  await cpuPerRequest(relayOnce, short, options.requests, 1)
  await cpuPerRequest(floorOnce, short, options.requests, 1)
  await cpuPerRequest(relayWithTelemetryOnce, short, options.requests, 1)
  const sides = { relay: [0, 0], floor: [0, 0], telemetry: [0, 0] }
  // Interleaved, so a busy moment of the machine does not land on one side only.
  for (const [index, chunks] of [short, long].entries()) {
    const requests = index === 0 ? options.requests : Math.ceil(options.requests / 4)
    ;(sides.floor as number[])[index] = await cpuPerRequest(
      floorOnce,
      chunks,
      requests,
      options.rounds,
    )
    ;(sides.relay as number[])[index] = await cpuPerRequest(
      relayOnce,
      chunks,
      requests,
      options.rounds,
    )
    ;(sides.telemetry as number[])[index] = await cpuPerRequest(
      relayWithTelemetryOnce,
      chunks,
      requests,
      options.rounds,
    )
  }
  const floor = line(sides.floor[0] as number, sides.floor[1] as number, shortFrames, longFrames)
  const relayed = line(sides.relay[0] as number, sides.relay[1] as number, shortFrames, longFrames)
  const instrumented = line(
    sides.telemetry[0] as number,
    sides.telemetry[1] as number,
    shortFrames,
    longFrames,
  )
  const listener = () => {}
  const shared = new AbortController().signal
  const primitives = {
    'new AbortController() and its signal': timeEach(20_000, () => new AbortController().signal),
    'a listener added to and removed from an AbortSignal': timeEach(20_000, () => {
      shared.addEventListener('abort', listener, { once: true })
      shared.removeEventListener('abort', listener)
    }),
    'setTimeout + clearTimeout': timeEach(20_000, () => clearTimeout(setTimeout(listener, 1e6))),
    'new Headers(4 entries)': timeEach(
      20_000,
      () => new Headers({ ...headers, a: '1', b: '2', c: '3' }),
    ),
    'new Response(null)': timeEach(20_000, () => new Response(null, { headers })),
    'new Response(new ReadableStream())': timeEach(5_000, () => new Response(new ReadableStream())),
    'crypto.randomUUID()': timeEach(20_000, () => globalThis.crypto.randomUUID()),
  }
  return {
    shortFrames,
    longFrames,
    floor,
    relay: relayed,
    added: {
      perRequestUs: relayed.perRequestUs - floor.perRequestUs,
      perFrameUs: relayed.perFrameUs - floor.perFrameUs,
    },
    telemetry: instrumented,
    telemetryShareOfAdded:
      (instrumented.perRequestUs - relayed.perRequestUs) /
      (relayed.perRequestUs - floor.perRequestUs),
    primitives,
  }
}
