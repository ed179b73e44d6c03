/**
 * The example gateway as users run it, beside the raw `node:http` pipe, each served in a
 * process of its own (bench/served-*.ts, built by scripts/bench.mjs), and the same gateway
 * bundle under Bun when a `bun` binary is at hand: memory (resident set after a warm-up and a
 * collection, its peak, the heap each idle stream holds) and CPU per request, per frame and
 * time to first byte, side by side in one run against one local OpenAI Chat upstream.
 */

import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { createInterface, type Interface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { serveFetch } from '../src/node.js'
import { chunkPerFrame, openaiChatOneFrame, openaiChatStream } from './inputs.js'
import type { ServedMemory } from './served-control.js'

const here = dirname(fileURLToPath(import.meta.url))
const built = import.meta.url.endsWith('.mjs')

interface RuntimeSide {
  readonly name: string
  /** Right after the warm-up, and a collection. */
  readonly warm: ServedMemory
  /** After `settleMs` idle, and a collection: what V8 keeps once it has shrunk its young generation. */
  readonly settled: ServedMemory
  /** With the idle streams open, after a collection. */
  readonly idle: ServedMemory
  /** The peak resident set over the whole run. */
  readonly peakRss: number
  readonly idleStreams: number
  /** Heap (JS heap + external) each idle stream held open at its first byte adds. */
  readonly heapBytesPerIdleStream: number
  readonly rssBytesPerIdleStream: number
  readonly cpuUsPerRequest: number
  readonly cpuUsPerFrame: number
  readonly ttfbP50Ms: number
}

export interface RuntimesResult {
  readonly warmUp: { readonly requests: number; readonly concurrency: number }
  readonly settleMs: number
  readonly requests: number
  readonly frameRequests: number
  readonly framesPerRequest: number
  readonly concurrency: number
  readonly raw: RuntimeSide
  readonly node: RuntimeSide
  /** The same gateway bundle under Bun; undefined (with `bunSkipped` saying why) without one. */
  readonly bun?: RuntimeSide
  readonly bunVersion?: string
  readonly bunSkipped?: string
  /** The gateway's resident set right after the warm-up against the raw pipe's. */
  readonly rssRatio: number
  /** The same, settled. */
  readonly settledRssRatio: number
}

/** The `bun` binary: `BUN_BIN`, the pinned one scripts/runtime-bin.mjs installed, or `bun` on PATH. */
function findBun(): { bin: string; version: string } | { skipped: string } {
  const candidates = [
    process.env.BUN_BIN,
    join(here, '..', '..', '..', '.runtimes', 'bun', 'node_modules', '.bin', 'bun'),
    join(here, '..', '.runtimes', 'bun', 'node_modules', '.bin', 'bun'),
    'bun',
  ]
  for (const bin of candidates) {
    if (bin === undefined || bin === '' || (bin.includes('/') && !existsSync(bin))) continue
    const probe = spawnSync(bin, ['--version'], { encoding: 'utf8' })
    if (probe.status === 0) return { bin, version: probe.stdout.trim() }
  }
  return {
    skipped:
      'Bun skipped: no bun binary (set BUN_BIN, or install the pinned one with `node scripts/runtime-bin.mjs bun`)',
  }
}

/** A served relay: its control line. */
interface Served {
  readonly name: string
  readonly child: ChildProcess
  readonly url: string
  ask<T>(command: 'cpu' | 'memory' | 'snapshot'): Promise<T>
  exit(): void
}

function serve(name: string, command: string, args: string[]): Promise<Served> {
  const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines: Interface = createInterface({
    input: child.stdout as NonNullable<typeof child.stdout>,
  })
  type Waiting = { resolve(value: Record<string, unknown>): void; reject(error: Error): void }
  const waiting: Waiting[] = []
  lines.on('line', (line) => {
    if (line.startsWith('{')) waiting.shift()?.resolve(JSON.parse(line) as Record<string, unknown>)
  })
  child.once('exit', (code) => {
    for (const w of waiting.splice(0)) w.reject(new Error(`${name} exited with ${code}`))
  })
  child.once('error', (error) => {
    for (const w of waiting.splice(0)) w.reject(error)
  })
  const next = () =>
    new Promise<Record<string, unknown>>((resolve, reject) => waiting.push({ resolve, reject }))
  return next().then(({ url }) => ({
    name,
    child,
    url: url as string,
    async ask<T>(what: 'cpu' | 'memory' | 'snapshot') {
      const answer = next()
      child.stdin?.write(`${what}\n`)
      return (await answer)[what] as T
    },
    exit: () => child.stdin?.end('exit\n'),
  }))
}

/** The file of a served relay and the runtime arguments to run it. */
function served(
  file: 'served-raw' | 'served-gateway',
  runtime: 'node' | 'bun',
  upstream: string,
): string[] {
  const path = join(here, `${file}.${built ? 'mjs' : 'ts'}`)
  if (runtime === 'bun') return [path, upstream]
  return [...(built ? ['--expose-gc'] : ['--expose-gc', '--import', 'tsx']), path, upstream]
}

const body = (model: string) =>
  JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] })

/** `requests` requests, `concurrency` at a time, each read to its end; first-byte times and frames. */
async function load(
  url: string,
  model: string,
  requests: number,
  concurrency: number,
): Promise<{ ttfb: number[]; frames: number }> {
  const ttfb: number[] = []
  let frames = 0
  let next = 0
  const request = body(model)
  const worker = async () => {
    while (next < requests) {
      next++
      const started = performance.now()
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: request,
      })
      const reader = (response.body as ReadableStream<Uint8Array>).getReader()
      let first = true
      let tail = 0
      for (let r = await reader.read(); !r.done; r = await reader.read()) {
        if (first) ttfb.push(performance.now() - started)
        first = false
        for (const byte of r.value) {
          tail = byte === 10 ? tail + 1 : 0
          if (tail === 2) frames++
        }
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  return { ttfb, frames }
}

/** `count` streams opened and read up to their first byte, then held. */
async function openIdle(url: string, count: number): Promise<(() => Promise<void>)[]> {
  const request = body('hold')
  return Promise.all(
    Array.from({ length: count }, async () => {
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: request,
      })
      const reader = (response.body as ReadableStream<Uint8Array>).getReader()
      await reader.read()
      return async () => {
        while (!(await reader.read()).done) {
          // read to the end
        }
      }
    }),
  )
}

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}

/** The local upstream: `model` names the answer (`frames-1`, `frames-<n>`, or `hold`: one frame, then open until released). */
async function startUpstream(framesPerRequest: number) {
  const one = [openaiChatOneFrame()]
  // No role-only preamble: the first frame is output (as bench/http.ts answers).
  const long = chunkPerFrame(openaiChatStream(framesPerRequest - 2)).slice(1)
  const held = new Set<() => void>()
  const server = await serveFetch(async (request) => {
    const { model } = (await request.json()) as { model: string }
    const chunks = model === 'frames-1' ? one : long
    let index = 0
    const stream = new ReadableStream<Uint8Array>(
      {
        pull(controller) {
          if (model === 'hold' && index === 1) {
            return new Promise<void>((resolve) => {
              held.add(() => {
                controller.close()
                resolve()
              })
            })
          }
          const chunk = chunks[index++]
          if (chunk === undefined) controller.close()
          else controller.enqueue(chunk)
        },
      },
      { highWaterMark: 0 },
    )
    return new Response(stream, { headers: { 'content-type': 'text/event-stream' } })
  })
  return {
    url: server.url,
    release() {
      for (const end of held) end()
      held.clear()
    },
    close: () => server.close(),
  }
}

interface Tally {
  cpuShort: number
  requests: number
  cpuLong: number
  frames: number
  ttfb: number[]
}

/**
 * CPU per request (1-frame answers) and per frame, and time to first byte one request at a
 * time, each side taking its share in turn, round after round, in a rotating order.
 */
async function measureCpu(
  sides: readonly Served[],
  options: Pick<
    Parameters<typeof benchRuntimes>[0],
    'requests' | 'frameRequests' | 'framesPerRequest' | 'concurrency' | 'latencyRequests' | 'rounds'
  >,
): Promise<Tally[]> {
  const tally: Tally[] = sides.map(() => ({
    cpuShort: 0,
    requests: 0,
    cpuLong: 0,
    frames: 0,
    ttfb: [],
  }))
  const share = (total: number, round: number) =>
    Math.floor(total / options.rounds) + (round < total % options.rounds ? 1 : 0)
  for (let round = 0; round < options.rounds; round++) {
    for (let turn = 0; turn < sides.length; turn++) {
      const index = (turn + round) % sides.length
      const side = sides[index] as Served
      const t = tally[index] as Tally
      let cpu = await side.ask<number>('cpu')
      const requests = share(options.requests, round)
      await load(side.url, 'frames-1', requests, options.concurrency)
      let now = await side.ask<number>('cpu')
      t.cpuShort += now - cpu
      t.requests += requests
      cpu = now
      const { frames } = await load(
        side.url,
        `frames-${options.framesPerRequest}`,
        share(options.frameRequests, round),
        options.concurrency,
      )
      now = await side.ask<number>('cpu')
      t.cpuLong += now - cpu
      t.frames += frames
      const latency = Math.ceil(options.latencyRequests / options.rounds)
      t.ttfb.push(...(await load(side.url, 'frames-1', latency, 1)).ttfb)
    }
  }
  return tally
}

export async function benchRuntimes(options: {
  warmUp: number
  requests: number
  frameRequests: number
  framesPerRequest: number
  concurrency: number
  latencyRequests: number
  idleStreams: number
  rounds: number
  /** Idle time after the warm-ups before the settled measure. */
  settleMs: number
}): Promise<RuntimesResult> {
  const bun = findBun()
  const upstream = await startUpstream(options.framesPerRequest)
  const sides: Served[] = []
  try {
    sides.push(
      await serve(
        'raw byte-pipe proxy (node:http pipe), Node',
        process.execPath,
        served('served-raw', 'node', upstream.url),
      ),
    )
    sides.push(
      await serve(
        'example gateway (built), Node',
        process.execPath,
        served('served-gateway', 'node', upstream.url),
      ),
    )
    if ('bin' in bun)
      sides.push(
        await serve(
          `example gateway (built), Bun ${bun.version}`,
          bun.bin,
          served('served-gateway', 'bun', upstream.url),
        ),
      )
    // Warm-up, then memory after a collection; then again once every side has been idle long
    // enough for V8 to give back the young generation the burst grew (it shrinks it at a
    // collection once its recent allocation rate is low: see docs/performance.md).
    const warm: ServedMemory[] = []
    for (const side of sides) {
      await load(side.url, 'frames-1', options.warmUp, options.concurrency)
      warm.push(await side.ask<ServedMemory>('memory'))
      // BENCH_HEAP_SNAPSHOTS=1: each side's heap after the warm-up, for a heap-snapshot viewer.
      if (process.env.BENCH_HEAP_SNAPSHOTS === '1') {
        console.log(`heap snapshot of ${side.name}: ${await side.ask<string>('snapshot')}`)
      }
    }
    await new Promise((resolve) => setTimeout(resolve, options.settleMs))
    const settled: ServedMemory[] = []
    for (const side of sides) settled.push(await side.ask<ServedMemory>('memory'))
    const tally = await measureCpu(sides, options)
    // Idle streams held at their first byte, one side at a time.
    const idleBefore: ServedMemory[] = []
    const idle: ServedMemory[] = []
    for (const side of sides) {
      const before = await side.ask<ServedMemory>('memory')
      const streams = await openIdle(side.url, options.idleStreams)
      idle.push(await side.ask<ServedMemory>('memory'))
      const ends = streams.map((end) => end())
      upstream.release()
      await Promise.all(ends)
      idleBefore.push(before)
    }
    const peaks = await Promise.all(sides.map((side) => side.ask<ServedMemory>('memory')))
    const results = sides.map((side, index): RuntimeSide => {
      const w = warm[index] as ServedMemory
      const before = idleBefore[index] as ServedMemory
      const i = idle[index] as ServedMemory
      const t = tally[index] as Tally
      return {
        name: side.name,
        warm: w,
        settled: settled[index] as ServedMemory,
        idle: i,
        peakRss: (peaks[index] as ServedMemory).peakRss,
        idleStreams: options.idleStreams,
        heapBytesPerIdleStream:
          (i.heapUsed + i.external - before.heapUsed - before.external) / options.idleStreams,
        rssBytesPerIdleStream: (i.rss - before.rss) / options.idleStreams,
        cpuUsPerRequest: t.cpuShort / t.requests,
        cpuUsPerFrame: t.cpuLong / t.frames,
        ttfbP50Ms: quantile(t.ttfb, 0.5),
      }
    })
    const [raw, node, onBun] = results as [RuntimeSide, RuntimeSide, RuntimeSide | undefined]
    return {
      warmUp: { requests: options.warmUp, concurrency: options.concurrency },
      settleMs: options.settleMs,
      requests: options.requests,
      frameRequests: options.frameRequests,
      framesPerRequest: options.framesPerRequest,
      concurrency: options.concurrency,
      raw,
      node,
      ...(onBun === undefined ? {} : { bun: onBun }),
      ...('bin' in bun ? { bunVersion: bun.version } : { bunSkipped: bun.skipped }),
      rssRatio: node.warm.rss / raw.warm.rss,
      settledRssRatio: node.settled.rss / raw.settled.rss,
    }
  } finally {
    for (const side of sides) side.exit()
    await upstream.close()
  }
}

const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1)
const kib = (bytes: number) => (bytes / 1024).toFixed(1)

/** The memory and runtimes tables. */
export function printRuntimes(result: RuntimesResult): void {
  const { raw, node, bun } = result
  const sides = bun === undefined ? [raw, node] : [raw, node, bun]
  console.log(
    `\n### Memory: the example gateway (built) beside the raw pipe, each in its own process (after ${result.warmUp.requests} requests of 1-frame answers, ${result.warmUp.concurrency} at a time, and a collection; settled: ${result.settleMs / 1000} s idle, then a collection; ${raw.idleStreams} idle streams held at their first byte)\n`,
  )
  console.log(
    '| process | RSS after warm-up MiB | × raw | settled RSS MiB | × raw | peak RSS MiB | heap used / total MiB | V8 young generation MiB | external MiB | heap per idle stream KiB | RSS per idle stream KiB |',
  )
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
  for (const side of sides) {
    const young = side.warm.spaces.new_space?.size
    console.log(
      `| ${side.name} | ${mib(side.warm.rss)} | ${(side.warm.rss / raw.warm.rss).toFixed(2)} | ${mib(side.settled.rss)} | ${(side.settled.rss / raw.settled.rss).toFixed(2)} | ${mib(side.peakRss)} | ${mib(side.warm.heapUsed)} / ${mib(side.warm.heapTotal)} | ${young === undefined ? '–' : mib(young)} | ${mib(side.warm.external)} | ${kib(side.heapBytesPerIdleStream)} | ${kib(side.rssBytesPerIdleStream)} |`,
    )
  }
  console.log(
    `\n### Runtimes: the same gateway bundle on Node ${process.version} and ${bun === undefined ? 'Bun (skipped)' : `Bun ${result.bunVersion}`} (CPU from each process; ${result.requests} requests of 1-frame answers and ${result.frameRequests} of ${result.framesPerRequest} frames, ${result.concurrency} at a time; first byte one request at a time)\n`,
  )
  console.log(
    '| process | CPU µs/request, 1-frame | × raw | CPU µs/frame | × raw | p50 TTFB ms | × raw | RSS after warm-up MiB |',
  )
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
  for (const side of sides) {
    console.log(
      `| ${side.name} | ${side.cpuUsPerRequest.toFixed(0)} | ${(side.cpuUsPerRequest / raw.cpuUsPerRequest).toFixed(2)} | ${side.cpuUsPerFrame.toFixed(2)} | ${(side.cpuUsPerFrame / raw.cpuUsPerFrame).toFixed(2)} | ${side.ttfbP50Ms.toFixed(2)} | ${(side.ttfbP50Ms / raw.ttfbP50Ms).toFixed(2)} | ${mib(side.warm.rss)} |`,
    )
  }
  if (result.bunSkipped !== undefined) console.log(`\n${result.bunSkipped}`)
}
