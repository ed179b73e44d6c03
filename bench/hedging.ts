/**
 * Hedging on a bimodal upstream, over real HTTP on 127.0.0.1: most attempts show their first
 * token after ~200 ms, one in ten after ~5 s (a cold replica, a queue). The same seeded load
 * runs through a `relay()` gateway without hedging, with a fixed `afterMs` and adaptive, side
 * by side in one run. Reports the client's time to first token (p50, p99), upstream requests
 * per client request, and hedges started, won and cancelled.
 *
 * Whether an attempt is slow is drawn from (seed, request number, attempt number), not from
 * arrival order: request 17's first attempt is slow in every contender.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import {
  createHedging,
  createMemoryKeyPool,
  type Hedging,
  openaiChat,
  type RelayOutcome,
  relay,
} from '../src/index.js'
import { nodeSink } from '../src/node.js'
import { seededRandom } from './inputs.js'

export interface HedgingBenchOptions {
  /** Measured client requests per contender. */
  readonly requests: number
  readonly concurrency: number
  /** Unmeasured requests first, through the same gateway (the adaptive delay learns here). */
  readonly warmUp: number
  /** The fast mode's first token (±20 %). */
  readonly fastMs: number
  /** The slow mode's first token (±20 %). */
  readonly slowMs: number
  /** The share of attempts in the slow mode. */
  readonly slowShare: number
  /** `afterMs` of the fixed contenders. */
  readonly fixedAfterMs: number
  readonly keys: number
  readonly seed: number
}

interface HedgingSide {
  readonly name: string
  readonly ttftP50Ms: number
  readonly ttftMeanMs: number
  readonly ttftP90Ms: number
  readonly ttftP95Ms: number
  readonly ttftP99Ms: number
  readonly ttftMaxMs: number
  /** Upstream requests per client request (1 without hedging or failures). */
  readonly upstreamPerRequest: number
  readonly hedgesStarted: number
  readonly wonByHedge: number
  readonly cancelled: number
  /** Upstream time of the cancelled attempts, summed, per client request. */
  readonly cancelledMsPerRequest: number
  /** Client requests whose first token took longer than half the slow mode. */
  readonly slowRequests: number
  readonly failed: number
  /** The adaptive delay at the end of the run, when adaptive. */
  readonly delayMs: number | undefined
}

export interface HedgingResult extends HedgingBenchOptions {
  readonly sides: HedgingSide[]
}

const answer = ['The ', 'quick ', 'brown ', 'fox.']

function frame(delta: Record<string, unknown>, finish: string | null = null): string {
  const choice = { index: 0, delta, finish_reason: finish }
  return `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', choices: [choice] })}\n\n`
}

/** The first-token delay of one attempt, from (seed, request, attempt) alone. */
function firstTokenMs(options: HedgingBenchOptions, request: number, attempt: number): number {
  const random = seededRandom(
    options.seed ^ Math.imul(request + 1, 0x9e3779b1) ^ Math.imul(attempt, 0x85ebca6b),
  )
  // Draw a few times: neighbouring seeds of mulberry32 start out alike.
  random()
  random()
  const slow = random() < options.slowShare
  return (slow ? options.slowMs : options.fastMs) * (0.8 + 0.4 * random())
}

function listen(server: Server): Promise<string> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
    }),
  )
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  })
}

/** Headers and the role preamble at once, then the first token after the drawn delay. */
async function startUpstream(options: HedgingBenchOptions) {
  let requests = 0
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    requests++
    req.resume()
    const request = Number(req.headers['x-bench-request'])
    const attempt = Number(req.headers['x-bench-attempt'])
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write(frame({ role: 'assistant', content: '' }))
    let index = 0
    let timer: ReturnType<typeof setTimeout> | undefined
    const next = () => {
      const word = answer[index++]
      if (word === undefined) {
        res.end(`${frame({}, 'stop')}data: [DONE]\n\n`)
        return
      }
      res.write(frame({ content: word }))
      timer = setTimeout(next, 5)
    }
    timer = setTimeout(next, firstTokenMs(options, request, attempt))
    res.on('close', () => clearTimeout(timer))
  })
  const url = await listen(server)
  return {
    url,
    get requests() {
      return requests
    },
    close: () => closeServer(server),
  }
}

/** `relay()` behind `node:http` over a memory pool of `keys` keys. */
async function startGateway(upstream: string, keys: number, hedge: Hedging | undefined) {
  const pool = createMemoryKeyPool(
    Array.from({ length: keys }, (_, index) => ({ id: `k${index}`, secret: `sk-bench-${index}` })),
  )
  const outcomes: RelayOutcome[] = []
  const server = createServer((req, res) => {
    req.resume()
    const request = String(req.headers['x-bench-request'])
    void relay({
      sink: nodeSink(res),
      pool,
      adapter: openaiChat,
      policy: {
        keepAliveIntervalMs: Number.POSITIVE_INFINITY,
        ...(hedge === undefined ? {} : { hedge }),
      },
      attempt: ({ key, signal, attemptNumber }) =>
        fetch(upstream, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${key.secret}`,
            'content-type': 'application/json',
            'x-bench-request': request,
            'x-bench-attempt': String(attemptNumber),
          },
          body: '{"model":"bench","stream":true,"messages":[]}',
          signal,
        }),
    }).then((outcome) => outcomes.push(outcome))
  })
  const url = await listen(server)
  return { url, outcomes, close: () => closeServer(server) }
}

/** Runs requests `from..from+count-1`, `concurrency` at a time; the time to first token of each. */
async function load(url: string, from: number, count: number, concurrency: number) {
  const ttft: number[] = []
  let failed = 0
  let next = 0
  const worker = async () => {
    while (next < count) {
      const request = from + next++
      const started = performance.now()
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-bench-request': String(request) },
        body: '{}',
      })
      const reader = (response.body as ReadableStream<Uint8Array>).getReader()
      let first = true
      for (let read = await reader.read(); !read.done; read = await reader.read()) {
        if (first) ttft.push(performance.now() - started)
        first = false
      }
      if (response.status !== 200) failed++
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  return { ttft, failed }
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}

/** One contender: its own upstream, gateway and hedging state, kept across rounds. */
async function startSide(options: HedgingBenchOptions, name: string, hedge: Hedging | undefined) {
  const upstream = await startUpstream(options)
  const gateway = await startGateway(upstream.url, options.keys, hedge)
  const ttft: number[] = []
  let failed = 0
  let upstreamRequests = 0
  let firstMeasured = -1
  return {
    /** Runs requests `from..from+count-1`; counted unless `warmUp`. */
    async run(from: number, count: number, warmUp: boolean) {
      const upstreamBefore = upstream.requests
      const outcomesBefore = gateway.outcomes.length
      const result = await load(gateway.url, from, count, options.concurrency)
      // The last relays settle just after their clients read the end.
      while (gateway.outcomes.length < outcomesBefore + count) {
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
      if (warmUp) return
      if (firstMeasured < 0) firstMeasured = outcomesBefore
      ttft.push(...result.ttft)
      failed += result.failed
      upstreamRequests += upstream.requests - upstreamBefore
    },
    async finish(): Promise<HedgingSide> {
      await gateway.close()
      await upstream.close()
      let hedgesStarted = 0
      let wonByHedge = 0
      let cancelled = 0
      let cancelledMs = 0
      for (const outcome of gateway.outcomes.slice(firstMeasured)) {
        if (outcome.kind !== 'committed' || outcome.hedges === undefined) continue
        hedgesStarted += outcome.hedges.started
        if (outcome.hedges.wonByHedge) wonByHedge++
        cancelled += outcome.hedges.cancelled
        cancelledMs += outcome.hedges.cancelledMs
      }
      const sorted = [...ttft].sort((a, b) => a - b)
      const delays = hedge?.snapshot().delays
      return {
        name,
        ttftP50Ms: quantile(sorted, 0.5),
        ttftMeanMs: sorted.reduce((sum, ms) => sum + ms, 0) / sorted.length,
        ttftP90Ms: quantile(sorted, 0.9),
        ttftP95Ms: quantile(sorted, 0.95),
        ttftP99Ms: quantile(sorted, 0.99),
        ttftMaxMs: sorted.at(-1) ?? Number.NaN,
        upstreamPerRequest: upstreamRequests / options.requests,
        hedgesStarted,
        wonByHedge,
        cancelled,
        cancelledMsPerRequest: cancelledMs / options.requests,
        slowRequests: ttft.filter((ms) => ms > options.slowMs / 2).length,
        failed,
        delayMs:
          hedge?.options.afterMs === 'adaptive' && delays !== undefined
            ? delays.primary
            : undefined,
      }
    },
  }
}

export async function benchHedging(options: HedgingBenchOptions): Promise<HedgingResult> {
  const fixed = options.fixedAfterMs
  const adaptive = (budget: number) =>
    createHedging({
      afterMs: 'adaptive',
      budget,
      // The default initial delay (2 s) scaled to this run's slow mode.
      adaptive: { initialMs: Math.round(options.slowMs * 0.4) },
    })
  const contenders: [string, Hedging | undefined][] = [
    ['no hedging', undefined],
    [`fixed afterMs ${fixed}, budget 0.1`, createHedging({ afterMs: fixed })],
    [`fixed afterMs ${fixed}, budget 0.2`, createHedging({ afterMs: fixed, budget: 0.2 })],
    ['adaptive p95, budget 0.1', adaptive(0.1)],
    ['adaptive p95, budget 0.2', adaptive(0.2)],
    // One hedge leaves a slow attempt's slow hedge (1 % here): a second covers that.
    [
      `fixed afterMs ${fixed}, budget 0.2, maxHedges 2`,
      createHedging({ afterMs: fixed, budget: 0.2, maxHedges: 2 }),
    ],
  ]
  const sides = await Promise.all(
    contenders.map(([name, hedge]) => startSide(options, name, hedge)),
  )
  // Round after round, each contender in turn on the same requests, so a machine busy for a
  // while slows every contender alike. Warm-up requests are numbered below the measured ones.
  for (const side of sides) await side.run(-options.warmUp, options.warmUp, true)
  const rounds = Math.max(1, Math.round(options.requests / (options.concurrency * 2)))
  for (let round = 0; round < rounds; round++) {
    const from = Math.round((round * options.requests) / rounds)
    const to = Math.round(((round + 1) * options.requests) / rounds)
    for (const side of sides) await side.run(from, to - from, false)
  }
  const results: HedgingSide[] = []
  for (const side of sides) results.push(await side.finish())
  return { ...options, sides: results }
}

const fmt = (value: number, digits = 0) => value.toFixed(digits)

/** Prints the result as the other benches do: a heading and a Markdown table. */
export function printHedging(result: HedgingResult): void {
  console.log(
    `\n### Hedging on a bimodal upstream (${result.requests} requests, ${result.concurrency} at a time, ${result.keys} keys; first token ${result.fastMs} ms, ${fmt(result.slowShare * 100)} % at ${result.slowMs} ms; ${result.warmUp} warm-up requests each)\n`,
  )
  console.log(
    '| contender | p50 TTFT ms | p90 | p95 | p99 | max | mean | slow requests | upstream req / request | hedges started | won by hedge | cancelled | cancelled upstream ms / request |',
  )
  console.log(
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  )
  for (const side of result.sides) {
    const name =
      side.delayMs === undefined ? side.name : `${side.name} (delay now ${side.delayMs} ms)`
    console.log(
      `| ${name} | ${fmt(side.ttftP50Ms)} | ${fmt(side.ttftP90Ms)} | ${fmt(side.ttftP95Ms)} | ${fmt(side.ttftP99Ms)} | ${fmt(side.ttftMaxMs)} | ${fmt(side.ttftMeanMs)} | ${side.slowRequests} | ${fmt(side.upstreamPerRequest, 3)} | ${side.hedgesStarted} | ${side.wonByHedge} | ${side.cancelled} | ${fmt(side.cancelledMsPerRequest, 1)} |`,
    )
  }
  const failed = result.sides.reduce((n, side) => n + side.failed, 0)
  if (failed > 0) console.log(`\n${failed} requests failed`)
}
