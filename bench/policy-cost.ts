/**
 * What a large, realistic policy costs per request against the defaults: CPU per 1-frame
 * answer, in process (an upstream `Response` made in memory, the client's body read through
 * `webSink()` to its end), 8 requests at a time. The large policy turns on hedging,
 * continuation after a cut, the non-streaming fallback and the context-window fit, sets every
 * bound (deadline, peek timeouts and limits, idle, write-stall and keep-alive timers, attempts,
 * backoff, key wait, frame and error-body sizes) and adds three hooks; the answer needs none of
 * them, so the figure is what the policy costs a request that goes well. Measured through a
 * relay built once with `createRelay()` (the target's figure) and, for reference, through
 * `relay()` given the same options on every request. The four sides take turns, round after
 * round in a rotating order; medians of the rounds; every outcome is checked to be a completed
 * answer.
 */

import {
  createHedging,
  createMemoryKeyPool,
  createRelay,
  type DownstreamSink,
  openaiChatWith,
  type RelayHooks,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  webSink,
} from '../src/index.js'
import { openaiChatOneFrame, streamOf } from './inputs.js'
import { checkEnded, drain } from './measure.js'

const concurrency = 8

const sideNames = {
  'compiled-defaults': 'createRelay(), default policy',
  'compiled-large': 'createRelay(), the large policy and 3 hooks',
  'relay-defaults': 'relay(), default policy',
  'relay-large': 'relay(), the large policy and 3 hooks',
} as const
type Side = keyof typeof sideNames
const sides = Object.keys(sideNames) as Side[]

interface PolicySide {
  readonly name: string
  /** CPU µs per request, median of the rounds. */
  readonly cpuUsPerRequest: number
  /** CPU µs per request of each round. */
  readonly rounds: readonly number[]
}

export interface PolicyCostResult {
  readonly requests: number
  readonly concurrency: number
  readonly rounds: number
  readonly sides: Readonly<Record<Side, PolicySide>>
  /** The large policy's CPU per request over the defaults', both through `createRelay()`. */
  readonly compiledRatio: number
  /** The same through `relay()` (the policy given on every request). */
  readonly relayRatio: number
}

/** Every bound set and every optional feature on, as a gateway in production would run it. */
function largePolicy(): RelayPolicy {
  return {
    maxAttempts: 4,
    deadlineMs: 120_000,
    maxWaitMs: 10_000,
    backoff: { baseMs: 250, factor: 2, maxMs: 4_000, jitter: 0.2 },
    peek: {
      commitOn: 'visible',
      firstByteTimeoutMs: 20_000,
      firstOutputTimeoutMs: 120_000,
      silenceTimeoutMs: 60_000,
      maxPeekBytes: 512 * 1024,
      maxPeekFrames: 2_048,
    },
    retryOn: [408, 429, 500, 502, 503, 529],
    overloadFallbackAfter: 2,
    idleTimeoutMs: 120_000,
    writeStallTimeoutMs: 30_000,
    stallThresholdMs: 1_500,
    keepAliveIntervalMs: 10_000,
    maxFrameBytes: 512 * 1024,
    maxErrorBodyBytes: 16 * 1024,
    hedge: createHedging({ afterMs: 5_000, maxHedges: 1, budget: 0.1 }),
    continueAfterCut: { maxContinuations: 1, maxAttempts: 2, timeoutMs: 20_000 },
    nonStreamingFallback: { timeoutMs: 60_000 },
    fitContextWindow: { marginTokens: 1_024, floorTokens: 2_000 },
  }
}

/** One request through each side: made once, then called per request. */
function makeSides(hookCalls: { count: number }): Record<Side, () => Promise<void>> {
  const chunks = [openaiChatOneFrame()]
  // Two keys, so a hedge would have one to go to (none starts: the answer is at once).
  const pool = createMemoryKeyPool([
    { id: 'bench-a', secret: 'sk-bench-a-not-real' },
    { id: 'bench-b', secret: 'sk-bench-b-not-real' },
  ])
  // The same adapter on every side: one that can continue a cut answer, as the policy needs.
  const adapter = openaiChatWith({ continuation: 'vllm-continue' })
  const attempt = async () =>
    new Response(streamOf(chunks), { headers: { 'content-type': 'text/event-stream' } })
  const request = {
    url: 'http://upstream.test/v1/chat/completions',
    body: { model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'hi' }] },
  }
  const policy = largePolicy()
  const hooks: RelayHooks = {
    onAttempt() {
      hookCalls.count++
    },
    onCommit() {
      hookCalls.count++
    },
    onOutcome() {
      hookCalls.count++
    },
  }
  const compiledDefaults = createRelay({ pool, adapter, attempt })
  const compiledLarge = createRelay({ pool, adapter, attempt, policy, hooks })
  const through = async (run: (sink: DownstreamSink) => Promise<RelayOutcome>) => {
    const { sink, response } = webSink()
    const outcome = run(sink)
    await drain((await response).body as ReadableStream<Uint8Array>)
    checkEnded(await outcome)
  }
  return {
    'compiled-defaults': () => through((sink) => compiledDefaults({ sink, request })),
    'compiled-large': () => through((sink) => compiledLarge({ sink, request })),
    'relay-defaults': () => through((sink) => relay({ sink, pool, adapter, attempt, request })),
    'relay-large': () =>
      through((sink) => relay({ sink, pool, adapter, attempt, request, policy, hooks })),
  }
}

/** CPU µs per request over `requests` requests, `concurrency` at a time. */
async function cpuPerRequest(run: () => Promise<void>, requests: number): Promise<number> {
  ;(globalThis as { gc?: () => void }).gc?.()
  const before = process.cpuUsage()
  for (let done = 0; done < requests; done += concurrency) {
    await Promise.all(Array.from({ length: Math.min(concurrency, requests - done) }, run))
  }
  const used = process.cpuUsage(before)
  return (used.user + used.system) / requests
}

const median = (values: readonly number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN

/** The large policy against the defaults, per 1-frame request (see the file's head). */
export async function benchPolicyCost(options: {
  requests: number
  rounds: number
}): Promise<PolicyCostResult> {
  const hookCalls = { count: 0 }
  const run = makeSides(hookCalls)
  // Warm-up: every side seen by the JIT before timing.
  for (const side of sides) await cpuPerRequest(run[side], Math.max(64, options.requests / 2))
  const samples = {} as Record<Side, number[]>
  for (const side of sides) samples[side] = []
  hookCalls.count = 0
  for (let round = 0; round < options.rounds; round++) {
    for (let turn = 0; turn < sides.length; turn++) {
      const side = sides[(round + turn) % sides.length] as Side
      samples[side].push(await cpuPerRequest(run[side], options.requests))
    }
  }
  // Three hooks per request on the two large sides: proof they ran.
  const expectedHookCalls = 2 * 3 * options.requests * options.rounds
  if (hookCalls.count !== expectedHookCalls)
    throw new Error(`the hooks ran ${hookCalls.count} times, not ${expectedHookCalls}`)
  const result = {} as Record<Side, PolicySide>
  for (const side of sides) {
    result[side] = {
      name: sideNames[side],
      cpuUsPerRequest: median(samples[side]),
      rounds: samples[side],
    }
  }
  return {
    requests: options.requests,
    concurrency,
    rounds: options.rounds,
    sides: result,
    compiledRatio:
      result['compiled-large'].cpuUsPerRequest / result['compiled-defaults'].cpuUsPerRequest,
    relayRatio: result['relay-large'].cpuUsPerRequest / result['relay-defaults'].cpuUsPerRequest,
  }
}

/** Prints the part's table. */
export function printPolicyCost(result: PolicyCostResult): void {
  console.log(
    `\n### A large policy against the defaults: CPU per 1-frame request, in process (${result.requests} requests per round, ${result.concurrency} at a time, median of ${result.rounds} rotating rounds)\n`,
  )
  console.log('| relay | CPU µs per request | × its defaults |')
  console.log('| --- | ---: | ---: |')
  for (const side of sides) {
    const own = result.sides[side]
    const defaults =
      result.sides[side.startsWith('compiled') ? 'compiled-defaults' : 'relay-defaults']
    console.log(
      `| ${own.name} | ${own.cpuUsPerRequest.toFixed(1)} | ${(own.cpuUsPerRequest / defaults.cpuUsPerRequest).toFixed(2)} |`,
    )
  }
  console.log(
    `\nthe large policy costs ${result.compiledRatio.toFixed(2)}× the defaults per request through createRelay(), ${result.relayRatio.toFixed(2)}× through relay()`,
  )
}
