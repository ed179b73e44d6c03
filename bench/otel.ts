/**
 * OpenTelemetry's cost per request, the way a user runs it: the example gateway (`node:http`
 * attempts) in four processes of its own (bench/otel-gateway.ts: no OTel; the OTel SDK alone
 * with the `AsyncHooksContextManager`, a `BatchSpanProcessor` and a `MeterProvider`; the same
 * with `stream-boundary/otel` recording every span and metric; the same with the
 * `AsyncLocalStorageContextManager`), one local upstream, requests 8 at a time, 1-frame and
 * short answers that report usage (so the token metrics record too). Each gateway takes a
 * share of the load in turn, round after round in a rotating order; CPU from each gateway
 * process (`process.cpuUsage()`), the load generator's and the upstream's not counted.
 */

import type { ChildProcess } from 'node:child_process'
import { serveFetch } from '../src/node.js'
import { cpuOf, startServingChild } from './child.js'

const encoder = new TextEncoder()
const head =
  '{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8","choices":'
const usage = '"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}'

/** Answers by the request's model: `one` a single frame (content, finish and usage), `short` 8. */
const answers: Readonly<Record<string, readonly Uint8Array[]>> = {
  one: [
    encoder.encode(
      `data: ${head}[{"index":0,"delta":{"role":"assistant","content":"ok"},"logprobs":null,"finish_reason":"stop"}],${usage}}\n\n`,
    ),
  ],
  short: [
    `data: ${head}[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`,
    ...['Hello', ' there,', ' how', ' can', ' I'].map(
      (word) =>
        `data: ${head}[{"index":0,"delta":{"content":"${word}"},"logprobs":null,"finish_reason":null}]}\n\n`,
    ),
    `data: ${head}[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n`,
    `data: ${head}[],${usage}}\n\ndata: [DONE]\n\n`,
  ].map((frame) => encoder.encode(frame)),
}

const sideNames = {
  off: 'the example gateway, no OpenTelemetry',
  sdk: 'the OTel SDK registered (AsyncHooksContextManager, BatchSpanProcessor, MeterProvider), no stream-boundary/otel',
  'async-hooks': 'the same with stream-boundary/otel (AsyncHooksContextManager)',
  als: 'the same with stream-boundary/otel (AsyncLocalStorageContextManager)',
} as const
type Mode = keyof typeof sideNames
const modes = Object.keys(sideNames) as Mode[]

interface OtelSide {
  readonly name: string
  /** Spans the gateway's exporter was handed over the whole run (warm-up included). */
  readonly spans: number
  /** CPU µs per request of the gateway process, per answer kind. */
  readonly cpuUsPerRequest: Readonly<Record<'one' | 'short', number>>
}

export interface OtelResult {
  readonly requests: number
  readonly concurrency: number
  readonly rounds: number
  readonly sides: Readonly<Record<Mode, OtelSide>>
  /**
   * CPU per request with `stream-boundary/otel` on (AsyncHooksContextManager) over the gateway
   * with no OpenTelemetry, minus one: the figure the ≤ +25 % target is about.
   */
  readonly overhead: Readonly<Record<'one' | 'short', number>>
  /** The same over the gateway with the SDK registered but no hooks: the integration alone. */
  readonly overheadOverSdk: Readonly<Record<'one' | 'short', number>>
  /** The same as `overhead` with the AsyncLocalStorageContextManager. */
  readonly overheadAls: Readonly<Record<'one' | 'short', number>>
}

function start(mode: Mode, upstream: string): Promise<{ child: ChildProcess; url: string }> {
  return startServingChild('otel-gateway', [mode, upstream])
}

/** `requests` requests for `model`, `concurrency` at a time, each read to its end. */
async function load(url: string, model: string, requests: number, concurrency: number) {
  const body = JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] })
  let next = 0
  const worker = async () => {
    while (next < requests) {
      next++
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      })
      if (response.status !== 200) throw new Error(`the gateway answered ${response.status}`)
      await response.arrayBuffer()
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}

export async function benchOtel(options: {
  requests: number
  rounds: number
  concurrency?: number
}): Promise<OtelResult> {
  const concurrency = options.concurrency ?? 8
  const upstream = await serveFetch(async (request) => {
    const { model } = (await request.json()) as { model: string }
    const chunks = answers[model] ?? []
    let index = 0
    const body = new ReadableStream<Uint8Array>(
      {
        pull(controller) {
          const chunk = chunks[index++]
          if (chunk === undefined) controller.close()
          else controller.enqueue(chunk)
        },
      },
      { highWaterMark: 0 },
    )
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
  })
  const gateways: { child: ChildProcess; url: string }[] = []
  const spans: Partial<Record<Mode, number>> = {}
  const kinds = ['one', 'short'] as const
  const tally = modes.map(() => ({ one: { cpu: 0, requests: 0 }, short: { cpu: 0, requests: 0 } }))
  try {
    for (const mode of modes) {
      const gateway = await start(mode, upstream.url)
      gateways.push(gateway)
      for (const kind of kinds) await load(gateway.url, kind, 200, concurrency)
    }
    const share = Math.ceil(options.requests / options.rounds)
    for (let round = 0; round < options.rounds; round++) {
      for (const kind of kinds) {
        for (let turn = 0; turn < modes.length; turn++) {
          const index = (turn + round) % modes.length
          const { child, url } = gateways[index] as { child: ChildProcess; url: string }
          const side = (tally[index] as (typeof tally)[number])[kind]
          const before = await cpuOf(child)
          await load(url, kind, share, concurrency)
          side.cpu += (await cpuOf(child)) - before
          side.requests += share
        }
      }
    }
    // The spans each gateway exported: none without the hooks, two per request with them.
    for (const [index, mode] of modes.entries()) {
      const { child } = gateways[index] as { child: ChildProcess }
      spans[mode] = await new Promise<number>((resolve) => {
        child.once('message', (message) => resolve((message as { spans: number }).spans))
        child.send('spans')
      })
    }
  } finally {
    for (const { child } of gateways) child.send('exit')
    await upstream.close()
  }
  const sides = Object.fromEntries(
    modes.map((mode, index) => {
      const side = tally[index] as (typeof tally)[number]
      return [
        mode,
        {
          name: sideNames[mode],
          spans: spans[mode] ?? 0,
          cpuUsPerRequest: {
            one: side.one.cpu / side.one.requests,
            short: side.short.cpu / side.short.requests,
          },
        },
      ]
    }),
  ) as Record<Mode, OtelSide>
  const ratio = (over: Mode, under: Mode) => ({
    one: sides[over].cpuUsPerRequest.one / sides[under].cpuUsPerRequest.one - 1,
    short: sides[over].cpuUsPerRequest.short / sides[under].cpuUsPerRequest.short - 1,
  })
  return {
    requests: share(options),
    concurrency,
    rounds: options.rounds,
    sides,
    overhead: ratio('async-hooks', 'off'),
    overheadOverSdk: ratio('async-hooks', 'sdk'),
    overheadAls: ratio('als', 'off'),
  }
}

function share(options: { requests: number; rounds: number }): number {
  return Math.ceil(options.requests / options.rounds) * options.rounds
}

/** Prints the result as the table docs/performance.md shows. */
export function printOtel(result: OtelResult): void {
  const pct = (value: number) => `${value >= 0 ? '+' : ''}${(100 * value).toFixed(1)} %`
  console.log(
    `\n### OpenTelemetry, as users run it: the example gateway (node:http attempts), ${result.requests} requests per side and answer kind, ${result.concurrency} at a time, ${result.rounds} interleaved rounds (CPU of each gateway process)\n`,
  )
  console.log('| gateway | CPU µs/request, 1-frame | CPU µs/request, 8-frame | spans exported |')
  console.log('| --- | ---: | ---: | ---: |')
  for (const side of Object.values(result.sides)) {
    console.log(
      `| ${side.name} | ${side.cpuUsPerRequest.one.toFixed(1)} | ${side.cpuUsPerRequest.short.toFixed(1)} | ${side.spans} |`,
    )
  }
  console.log(
    `\nOTel on (AsyncHooksContextManager): ${pct(result.overhead.one)} CPU per request (1-frame), ${pct(result.overhead.short)} (8-frame); stream-boundary/otel over the SDK alone: ${pct(result.overheadOverSdk.one)}, ${pct(result.overheadOverSdk.short)}; with the AsyncLocalStorageContextManager: ${pct(result.overheadAls.one)}, ${pct(result.overheadAls.short)}.`,
  )
}
