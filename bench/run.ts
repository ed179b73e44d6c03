/**
 * `npm run bench`: every benchmark, side by side in one run, written to
 * bench/results/latest.json and printed as the tables the README shows.
 * `BENCH_QUICK=1` runs tiny sizes (a smoke run); `BENCH_ONLY=relay,promises,request,policy,frame,fields,first,memory,http,runtimes,transports,hedging,recovery,otel,fleet-scale,fleet-replicas,fleet-latency` (or `npm run bench -- --only …`) picks (a partial run writes
 * bench/results/partial.local.json, leaving latest.json to full runs). The run ends with the
 * summary: each #45 target beside this run's figure (bench/summary.ts).
 */

import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { forkChild } from './child.js'
import { benchFetchCost } from './fetch-cost.js'
import { benchFields } from './fields.js'
import { benchFirstOutput } from './first-output.js'
import { benchFleet, printFleet } from './fleet.js'
import { benchFleetLatency, printFleetLatency } from './fleet-latency.js'
import { benchFleetReplicas, printFleetReplicas } from './fleet-replicas.js'
import { benchFleetScale, printFleetScale } from './fleet-scale.js'
import { type FleetSummaryInputs, printFleetSummary } from './fleet-summary.js'
import { benchFramePath } from './frame-path.js'
import { benchHedging, printHedging } from './hedging.js'
import { benchHttp } from './http.js'
import type { MemoryResult } from './memory.js'
import { benchOtel, printOtel } from './otel.js'
import { benchPerRequest } from './per-request.js'
import { benchPolicyCost, printPolicyCost } from './policy-cost.js'
import { benchPromises } from './promises.js'
import type { RecoveryResult } from './recovery.js'
import { benchRelayPath } from './relay-path.js'
import { benchRuntimes, printRuntimes } from './runtimes.js'
import { printSummary, type SummaryInputs } from './summary.js'
import { benchTransports, printTransports } from './transports.js'

const quick = process.env.BENCH_QUICK === '1'
const only = new Set(
  (
    process.env.BENCH_ONLY ??
    'relay,promises,request,policy,frame,fields,first,memory,http,runtimes,transports,hedging,recovery,otel,fleet-scale,fleet-replicas,fleet-latency'
  ).split(','),
)
const here = dirname(fileURLToPath(import.meta.url))

/** Runs `bench/<name>` in a fresh process (built next to this bundle, or through tsx); its result. */
function resultOfChild<T>(name: string, args: string[], execArgv: string[] = []): Promise<T> {
  const child = forkChild(name, args, execArgv)
  return new Promise((resolve, reject) => {
    child.once('message', (message) => resolve(message as T))
    child.once('error', reject)
    child.once('exit', (code) => {
      if (code !== 0) reject(new Error(`the ${name} benchmark exited with ${code}`))
    })
  })
}

const fmt = (value: number, digits = 2) => value.toFixed(digits)

async function main() {
  const started = new Date().toISOString()
  console.log(`stream-boundary benchmarks (${quick ? 'quick' : 'full'}) on Node ${process.version}`)
  const results: Record<string, unknown> = { started, node: process.version, quick }
  // What the closing summary reads, filled by the benchmarks that ran (the OTel benchmark sets
  // `otelIncreasePercent`).
  const summary: { -readonly [K in keyof SummaryInputs]: SummaryInputs[K] } = {}
  const fleet: { -readonly [K in keyof FleetSummaryInputs]: FleetSummaryInputs[K] } = {}

  if (only.has('relay')) {
    const relayPath = await benchRelayPath(
      quick ? { frames: 500, rounds: 3 } : { frames: 100_000, rounds: 5 },
    )
    results.relayPath = relayPath
    console.log(
      `\n### Relay path: relay() + webSink(), one frame per chunk (${relayPath.frames} OpenAI Chat frames, ${relayPath.bytes} bytes, median of rounds)\n`,
    )
    console.log('| relay | µs/frame | best round µs/frame | × raw relay |')
    console.log('| --- | ---: | ---: | ---: |')
    for (const r of relayPath.results) {
      console.log(
        `| ${r.name} | ${fmt(r.usPerFrame, 3)} | ${fmt(r.bestUsPerFrame, 3)} | ${fmt(r.ratioToRaw)} |`,
      )
    }
    console.log(
      `\nrelay(): ${fmt(relayPath.relayToRaw)}× the raw web-stream relay per frame, ${fmt(relayPath.parsingToRelay)}× cheaper than decoding, parsing and re-encoding every frame (fastest rounds: ${fmt(relayPath.relayToRawBest)}×, ${fmt(relayPath.parsingToRelayBest)}×)`,
    )
  }

  if (only.has('promises')) {
    const promises = await benchPromises({ requests: quick ? 50 : 1_000 })
    results.promises = promises
    summary.promisesPerRequest = promises.library
    console.log(
      `\n### Promises per request: relay() + webSink(), 1-frame answers (async_hooks count, ${promises.requests} requests one after another)\n`,
    )
    console.log('| side | promises per request |')
    console.log('| --- | ---: |')
    console.log(
      `| the host's own work (an upstream Response made, a body read to its end) | ${fmt(promises.host, 1)} |`,
    )
    console.log(`| relay() + webSink() | ${fmt(promises.relay, 1)} |`)
    console.log(`| added by the library | ${fmt(promises.library, 1)} |`)
    console.log(
      `| added by the library, relay built once with createRelay() | ${fmt(promises.compiled, 1)} |`,
    )
    console.log(
      `\ntimers the library sets per request: ${fmt(promises.timers, 1)} (createRelay(): ${fmt(promises.compiledTimers, 1)})`,
    )
  }

  if (only.has('request')) {
    const perRequest = await benchPerRequest(
      quick
        ? { requests: 64, rounds: 3, shortFrames: 10, longFrames: 40 }
        : { requests: 4_000, rounds: 5, shortFrames: 20, longFrames: 200 },
    )
    results.perRequest = perRequest
    console.log(
      `\n### Per request, in process: relay() over ${perRequest.shortFrames}- and ${perRequest.longFrames}-frame streams into a sink that takes every write (CPU, 32 at a time, median of rounds)\n`,
    )
    console.log('| side | CPU µs per request (fixed) | CPU µs per frame |')
    console.log('| --- | ---: | ---: |')
    for (const [name, side] of [
      ['the frames iterated and written (floor)', perRequest.floor],
      ['relay()', perRequest.relay],
      ['added by the library', perRequest.added],
      ['relay() with stream-boundary/otel (OTel SDK spans and metrics)', perRequest.telemetry],
    ] as const) {
      console.log(`| ${name} | ${fmt(side.perRequestUs, 1)} | ${fmt(side.perFrameUs, 2)} |`)
    }
    console.log(
      `\nTelemetry on: +${fmt(perRequest.telemetry.perRequestUs - perRequest.relay.perRequestUs, 1)} µs per request (${fmt(100 * perRequest.telemetryShareOfAdded, 0)} % of what the library adds), ${fmt(perRequest.telemetry.perFrameUs - perRequest.relay.perFrameUs, 2)} µs per frame.`,
    )
    console.log('\n| runtime operation (a relay needs some per request) | µs each |')
    console.log('| --- | ---: |')
    for (const [name, us] of Object.entries(perRequest.primitives)) {
      console.log(`| ${name} | ${fmt(us, 2)} |`)
    }
  }

  if (only.has('policy')) {
    const policyCost = await benchPolicyCost(
      quick ? { requests: 200, rounds: 3 } : { requests: 2_000, rounds: 5 },
    )
    results.policyCost = policyCost
    summary.policyCostRatio = policyCost.compiledRatio
    printPolicyCost(policyCost)
  }

  if (only.has('otel')) {
    const otel = await benchOtel(
      quick ? { requests: 40, rounds: 2 } : { requests: 4_000, rounds: 5 },
    )
    results.otel = otel
    summary.otelIncreasePercent = otel.overhead.one * 100
    printOtel(otel)
  }

  if (only.has('frame')) {
    const framePath = await benchFramePath(
      quick ? { frames: 500, rounds: 3 } : { frames: 20_000, rounds: 15 },
    )
    results.framePath = framePath
    for (const group of framePath) {
      console.log(
        `\n### Frame path: ${group.input}, ${group.chunking} (${group.frames} frames, ${group.bytes} bytes)\n`,
      )
      console.log('| contender | µs/frame | MB/s | × floor |')
      console.log('| --- | ---: | ---: | ---: |')
      for (const r of group.results) {
        console.log(
          `| ${r.name} | ${fmt(r.usPerFrame, 3)} | ${fmt(r.megabytesPerSecond, 0)} | ${fmt(r.ratioToFloor)} |`,
        )
      }
      const pump = group.results.find((r) => r.name.startsWith('whole pump'))
      const pipeline = group.results.find((r) => r.name.endsWith('JSON.parse'))
      if (pump !== undefined && pipeline !== undefined) {
        console.log(
          `\nwhole pump: ${fmt(pump.ratioToFloor)}× the floor, ${fmt(pipeline.usPerFrame / pump.usPerFrame)}× cheaper than the pipeline with JSON.parse`,
        )
      }
    }
  }

  if (only.has('fields')) {
    const fields = await benchFields(
      quick ? { frames: 500, rounds: 3 } : { frames: 20_000, rounds: 31 },
    )
    results.fields = fields
    for (const group of fields) {
      console.log(`\n### Field parsing: ${group.input} (${group.frames} frames, decode included)\n`)
      console.log('| parser | µs/frame (median) | µs/frame (best round) |')
      console.log('| --- | ---: | ---: |')
      for (const r of group.results)
        console.log(`| ${r.name} | ${fmt(r.usPerFrame, 3)} | ${fmt(r.bestUsPerFrame, 3)} |`)
    }
  }

  if (only.has('first')) {
    const first = await benchFirstOutput(quick ? 50 : 2000)
    results.firstOutput = first
    console.log(`\n### Time to first output (${first.samples} streams, in process)\n`)
    console.log('| path | p50 ms | p99 ms |')
    console.log('| --- | ---: | ---: |')
    console.log(
      `| bare pipe (read, write) | ${fmt(first.barePipe.p50, 3)} | ${fmt(first.barePipe.p99, 3)} |`,
    )
    console.log(
      `| deliver(): peek, commit, pump | ${fmt(first.deliver.p50, 3)} | ${fmt(first.deliver.p99, 3)} |`,
    )
    console.log(`\npeek adds ${fmt(first.addedP99Ms, 3)} ms at p99`)
  }

  if (only.has('memory')) {
    const memory = await resultOfChild<MemoryResult>(
      'memory-child',
      quick ? ['200', '5000'] : ['10000', '1000000'],
      ['--expose-gc'],
    )
    results.memory = memory
    console.log(
      `\n### Memory (${memory.streams} idle in-flight streams; soak of ${memory.soak.frames} frames)\n`,
    )
    console.log('| measure | value |')
    console.log('| --- | ---: |')
    console.log(
      `| heap per stream, upstream only read (floor) | ${fmt(memory.floorBytesPerStream / 1024)} KiB |`,
    )
    console.log(
      `| heap per stream, held open through the pump | ${fmt(memory.pumpBytesPerStream / 1024)} KiB |`,
    )
    console.log(
      `| added by the library per stream | ${fmt(memory.libraryBytesPerStream / 1024)} KiB |`,
    )
    console.log(
      `| soak heap samples (MiB) | ${memory.soak.heapMiB.map((v) => fmt(v, 1)).join(', ')} |`,
    )
    console.log(`| soak heap growth after warm-up | ${fmt(memory.soak.growthMiB, 2)} MiB |`)
  }

  if (only.has('http')) {
    const http = await benchHttp(
      quick
        ? { requests: 16, concurrency: 4, framesPerRequest: 50, latencyRequests: 8 }
        : { requests: 400, concurrency: 32, framesPerRequest: 200, latencyRequests: 200 },
    )
    results.http = http
    // Short answers: what a request costs by itself (its set-up, head and end), per request.
    // One frame (the content and the finish together, what the figures use) and three
    // (one output frame, the finish, [DONE]).
    const shortSizes = quick
      ? { requests: 32, concurrency: 4, latencyRequests: 8 }
      : { requests: 2_000, concurrency: 32, latencyRequests: 200 }
    const one = await benchHttp({ ...shortSizes, framesPerRequest: 1, parts: true })
    const three = await benchHttp({ ...shortSizes, framesPerRequest: 3 })
    results.httpOneFrame = one
    results.httpShort = three
    summary.http = http
    summary.httpOneFrame = one
    console.log(
      `\n### HTTP on 127.0.0.1: CPU per frame (${http.requests} streaming requests, ${http.concurrency} at a time, ${http.framesPerRequest} frames each, the first one output) and per request (${one.requests} requests of 1-frame answers, ${one.concurrency} at a time); time to first byte one request at a time\n`,
    )
    console.log(
      '| relay | CPU µs/frame | × raw pipe | CPU µs/request, 1-frame answers | × raw pipe | × node:http attempts | p50 TTFB ms, 1-frame | × raw pipe | p50 / p99 TTFB ms, 200 frames |',
    )
    console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    const sides = [
      [http.raw, one.raw],
      [http.fetchPipe, one.fetchPipe],
      [http.gateway, one.gateway],
      [http.gatewayFetch, one.gatewayFetch],
      [http.gatewayToWeb, one.gatewayToWeb],
    ] as const
    for (const [long, short] of sides) {
      console.log(
        `| ${long.name} | ${fmt(long.cpuUsPerFrame, 2)} | ${fmt(long.cpuUsPerFrame / http.raw.cpuUsPerFrame)} | ${fmt(short.cpuUsPerRequest, 0)} | ${fmt(short.cpuUsPerRequest / one.raw.cpuUsPerRequest)} | ${fmt(short.cpuUsPerRequest / one.gateway.cpuUsPerRequest)} | ${fmt(short.ttfbP50Ms)} | ${fmt(short.ttfbP50Ms / one.raw.ttfbP50Ms)} | ${fmt(long.ttfbP50Ms)} / ${fmt(long.ttfbP99Ms)} |`,
      )
    }
    if (one.edges !== undefined && one.relayMemory !== undefined) {
      console.log(
        `\n### HTTP per request, 1-frame answers, the gateway in parts (the same run: ${one.requests} requests, ${one.concurrency} at a time)\n`,
      )
      console.log('| relay | CPU µs/request | × raw pipe | p50 TTFB ms |')
      console.log('| --- | ---: | ---: | ---: |')
      for (const side of [one.raw, one.edges, one.relayMemory, one.gateway]) {
        console.log(
          `| ${side.name} | ${fmt(side.cpuUsPerRequest, 0)} | ${fmt(side.cpuUsPerRequest / one.raw.cpuUsPerRequest)} | ${fmt(side.ttfbP50Ms)} |`,
        )
      }
    }
    console.log(
      `\n### HTTP per request, 3-frame answers (${three.requests} requests: one output frame, the finish, [DONE]; ${three.concurrency} at a time)\n`,
    )
    console.log('| relay | CPU µs/request | × raw pipe | × node:http attempts | p50 TTFB ms |')
    console.log('| --- | ---: | ---: | ---: | ---: |')
    for (const side of [three.raw, three.fetchPipe, three.gateway, three.gatewayFetch]) {
      console.log(
        `| ${side.name} | ${fmt(side.cpuUsPerRequest, 0)} | ${fmt(side.cpuUsPerRequest / three.raw.cpuUsPerRequest)} | ${fmt(side.cpuUsPerRequest / three.gateway.cpuUsPerRequest)} | ${fmt(side.ttfbP50Ms)} |`,
      )
    }
    console.log(
      `\ngateway CPU per frame: ${fmt(http.cpuRatio)}× the raw byte pipe (fetch attempts ${fmt(http.cpuRatioFetch)}×, node:http + toWeb ${fmt(http.cpuRatioToWeb)}×); per request (1-frame answers): ${fmt(one.gateway.cpuUsPerRequest / one.raw.cpuUsPerRequest)}× the raw pipe, fetch attempts ${fmt(one.gatewayFetch.cpuUsPerRequest / one.gateway.cpuUsPerRequest)}× node:http attempts; time to first byte ${fmt(one.ttfbP50Ratio)}× at p50 (1-frame), ${fmt(http.ttfbP50Ratio)}× / ${fmt(http.ttfbP99Ratio)}× at p50 / p99 (200 frames)`,
    )
  }

  if (only.has('http')) {
    const fetchCost = await benchFetchCost(
      quick ? { requests: 50, rounds: 2 } : { requests: 2_000, rounds: 5 },
    )
    results.fetchCost = fetchCost
    console.log(
      `\n### What one fetch() costs, by its options (${fetchCost.requests} POSTs to 127.0.0.1, a one-frame answer read to the end, client and server in one process, 16 at a time)\n`,
    )
    console.log('| fetch options | CPU µs per request |')
    console.log('| --- | ---: |')
    for (const [name, us] of Object.entries(fetchCost.perRequestUs)) {
      console.log(`| ${name} | ${fmt(us, 0)} |`)
    }
  }

  if (only.has('runtimes')) {
    // Memory of the built example gateway beside the raw pipe, and the gateway under Bun.
    const runtimes = await benchRuntimes(
      quick
        ? {
            warmUp: 64,
            requests: 32,
            frameRequests: 8,
            framesPerRequest: 50,
            concurrency: 8,
            latencyRequests: 8,
            idleStreams: 32,
            rounds: 2,
            settleMs: 0,
          }
        : {
            warmUp: 1_000,
            requests: 2_000,
            frameRequests: 400,
            framesPerRequest: 200,
            concurrency: 32,
            latencyRequests: 200,
            idleStreams: 1_000,
            rounds: 4,
            settleMs: 10_000,
          },
    )
    results.runtimes = runtimes
    summary.runtimes = runtimes
    printRuntimes(runtimes)
  }

  if (only.has('transports')) {
    const transports = await benchTransports(
      quick ? { requests: 32, frames: 20, rounds: 1 } : { requests: 2_000, frames: 200, rounds: 5 },
    )
    results.transports = transports
    printTransports(transports)
  }

  if (only.has('hedging')) {
    const hedging = await benchHedging({
      ...(quick
        ? { requests: 60, concurrency: 8, warmUp: 30, fastMs: 20, slowMs: 500, fixedAfterMs: 40 }
        : {
            requests: 300,
            concurrency: 32,
            warmUp: 100,
            fastMs: 200,
            slowMs: 5000,
            fixedAfterMs: 400,
          }),
      slowShare: 0.1,
      keys: 4,
      seed: 19,
    })
    results.hedging = hedging
    printHedging(hedging)
  }

  if (only.has('recovery')) {
    // Its own process: see bench/recovery.ts.
    const recovery = await resultOfChild<RecoveryResult>(
      'recovery',
      quick ? ['recovery', '4', '1'] : ['recovery', '40', '5'],
    )
    results.recovery = recovery
    console.log(
      `\n### Recovery from an empty stream: one key through the example gateway, default policy (${recovery.requests} requests each, one at a time, after ${recovery.warmUp} warm-up)\n`,
    )
    console.log('| first attempt | p50 TTFT ms | p90 TTFT ms | upstream req / request | failed |')
    console.log('| --- | ---: | ---: | ---: | ---: |')
    for (const side of [recovery.clean, recovery.empty]) {
      const name = side.name === 'clean' ? 'clean answer' : 'empty stream, then an answer'
      console.log(
        `| ${name} | ${fmt(side.ttftP50Ms)} | ${fmt(side.ttftP90Ms)} | ${fmt(side.upstreamPerRequest)} | ${side.failed} |`,
      )
    }
    console.log(
      `\nan empty first stream adds ${fmt(recovery.extraP50Ms, 1)} ms at p50 (${fmt(recovery.extraP90Ms, 1)} ms at p90), ${fmt(recovery.ratioP50)}× the clean time to first token`,
    )
  }

  // Key selection on a simulated fleet (~2 minutes): only when named, `BENCH_ONLY=fleet`.
  if (only.has('fleet')) {
    const fleet = await benchFleet({
      ...(quick
        ? { requests: 100, capacityPerSecond: 40, bareRequests: 80, capMs: 4_000 }
        : // The 1,500 requests scaled to ~9 s a row: on a busy shared 2-core VM a relayed
          // request costs ~2.5 ms of CPU in process (~5 ms over HTTP), and the machine gives little.
          { requests: 300, capacityPerSecond: 40, bareRequests: 200, capMs: 10_000 }),
      transport: 'in-process',
      concurrency: 32,
      load: 0.8,
      rateLimitedMs: 20,
      firstTokenMs: 40,
      seed: 46,
    })
    results.fleet = fleet
    printFleet(fleet)
  }

  // Issue #55: selection at 4, 100 and 1,000 keys; 10 replicas on one Redis and on a Redis
  // Cluster; fastest's p95 and headroom's 429s under bursts (~4 minutes in all at full size).
  if (only.has('fleet-scale')) {
    const scale = await benchFleetScale(
      quick
        ? {
            sizes: [4, 50],
            memoryRequests: 200,
            redisRequests: 40,
            relayRequests: 20,
            rounds: 1,
            concurrency: 8,
          }
        : {
            sizes: [4, 100, 1000],
            memoryRequests: 2_000,
            redisRequests: 100,
            relayRequests: 150,
            rounds: 3,
            concurrency: 8,
          },
    )
    results.fleetScale = scale
    fleet.scale = scale
    printFleetScale(scale)
  }
  if (only.has('fleet-replicas')) {
    const replicas = await benchFleetReplicas(
      quick
        ? { replicas: 2, keys: 50, durationMs: 500, concurrency: 4, selections: ['round-robin'] }
        : {
            replicas: 10,
            keys: 1000,
            durationMs: 8_000,
            concurrency: 8,
            selections: ['round-robin', 'headroom'],
          },
    )
    results.fleetReplicas = replicas
    fleet.replicas = replicas
    printFleetReplicas(replicas)
  }
  if (only.has('fleet-latency')) {
    const latency = await benchFleetLatency(
      quick
        ? {
            slowRequests: 40,
            slowRatePerSecond: 40,
            burst: 8,
            stepCapacityPerSecond: 40,
            lowMs: 250,
            highMs: 750,
            seed: 55,
          }
        : {
            slowRequests: 600,
            slowRatePerSecond: 100,
            burst: 16,
            stepCapacityPerSecond: 100,
            lowMs: 2_000,
            highMs: 5_000,
            seed: 55,
          },
    )
    results.fleetLatency = latency
    fleet.latency = latency
    printFleetLatency(latency)
  }

  // The #45 summary, when a part it reads ran (a fleet-only run has none of its figures).
  if (Object.values(summary).some((value) => value !== undefined)) {
    results.summary = printSummary(summary)
  }
  if (Object.values(fleet).some((value) => value !== undefined)) {
    results.fleetSummary = printFleetSummary(fleet)
  }

  const dir = process.env.BENCH_RESULTS_DIR ?? join(here, 'results')
  mkdirSync(dir, { recursive: true })
  const partial = process.env.BENCH_ONLY !== undefined
  const file = join(
    dir,
    quick ? 'quick.local.json' : partial ? 'partial.local.json' : 'latest.json',
  )
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`)
  console.log(`\nwritten to ${file}`)
}

await main()
