/**
 * A chaos run: the faulty upstream behind the gateway, the client in front of it, the judge
 * on what came out. Scenario mode plays each scenario once; load mode plays many requests
 * with a seeded random fault mix.
 *
 * @module
 */

import { mkdir, writeFile } from 'node:fs/promises'
import { redactSecrets } from '../protocols/sanitize.js'
import { createFaultyUpstream, type FaultyUpstream } from '../testing/faulty-upstream.js'
import type { ChaosOptions } from './args.js'
import { type ClientRun, runClient } from './client.js'
import { buildClientRequest, protocolAdapters } from './client-request.js'
import {
  exitWords,
  type GatewayProcess,
  portOpen,
  startGatewayProcess,
  waitForPort,
} from './gateway-process.js'
import { badOutcomes, type Judgement, judgeObservation, type OutcomeKind } from './judge.js'
import { nothingJudgedCause } from './nothing-judged.js'
import {
  type ChaosScenario,
  chaosAnswer,
  chaosReasoning,
  chaosScenarios,
  loadFaults,
  upstreamScripts,
} from './scenarios.js'

/** A scenario's line on the scorecard. */
export interface ScenarioResult {
  readonly name: string
  readonly expect: ChaosScenario['expect']
  readonly summary: string
  /** What the client got; `left` when the client disconnected on purpose. */
  readonly outcome: OutcomeKind | 'left'
  readonly mark: '✓' | '✗' | 'n/a'
  readonly reason: string
  /** Upstream attempts the gateway made for this request. */
  readonly attempts: number
  readonly firstByteMs: number | null
  readonly firstTokenMs: number | null
  /** `client-disconnect`: how long the upstream stream stayed open after the client left. */
  readonly upstreamHeldMs: number | null
}

/** Counts of client-visible outcomes. */
interface OutcomeCounts {
  readonly requests: number
  readonly answered: number
  readonly honestErrors: number
  readonly silentFailures: number
  readonly duplicates: number
  readonly hangs: number
}

/** Memory of the gateway's process group (Linux, when the command started it), in bytes. */
interface GatewayMemory {
  readonly startRssBytes: number
  readonly peakRssBytes: number
  /** The lowest resident memory in the 5 s after the last request. */
  readonly endRssBytes: number
}

/** What load mode measured. */
interface LoadResult {
  readonly concurrency: number
  readonly faultRate: number
  readonly seed: number
  readonly attemptsPerRequest: { readonly mean: number; readonly max: number }
  readonly firstTokenMs: { readonly p50: number | null; readonly p99: number | null }
  readonly requestsPerSecond: number
  readonly gatewayMemory: GatewayMemory | null
  /** The first few requests that ended silently, duplicated or hung. */
  readonly badExamples: readonly { readonly fault: string; readonly reason: string }[]
  /**
   * Per fault of the mix (`ok` included): what its requests got, and how many missed the
   * scenario's expectation (an answer where a retry was still possible, say).
   */
  readonly byFault: Readonly<Record<string, OutcomeCounts & { readonly missed: number }>>
}

/** Everything a run found; `--json` prints it as is. */
export interface ChaosReport {
  readonly mode: 'scenarios' | 'load'
  readonly target: string
  readonly protocol: string
  /** The key selection the started gateway was asked for (`--selection`), if any. */
  readonly selection?: string
  readonly upstream: string
  readonly scenarios: readonly ScenarioResult[]
  readonly load: LoadResult | null
  readonly counts: OutcomeCounts
  readonly durationMs: number
  /** The hang bound the run used, in milliseconds. */
  readonly hangMs: number
  /** Scenario mode: how many scenarios got each mark. */
  readonly marks: Readonly<Record<'✓' | '✗' | 'n/a', number>>
  /**
   * 0: nothing that fails the run (see `failOn`); 1: a ✗ (or, with `failOn: 'silent'` and in
   * load mode, a silent failure, duplicate or hang); 3: nothing was judged (every scenario
   * n/a).
   */
  readonly exitCode: 0 | 1 | 3
  /** Exit 3: the likely cause and what to check. */
  readonly nothingJudged?: string
}

/**
 * The run's exit code: a ✗ fails it (with `failOn: 'any'`, in scenario mode), as does any
 * silent failure, duplicate or hang; a scenario run in which nothing could be judged is its
 * own failure, since a PASS over nothing would hide a wrong target.
 */
function exitCodeOf(
  options: ChaosOptions,
  counts: OutcomeCounts,
  marks: Readonly<Record<'✓' | '✗' | 'n/a', number>>,
  scenarios: number,
): 0 | 1 | 3 {
  if (counts.silentFailures + counts.duplicates + counts.hangs > 0) return 1
  if (options.requests !== undefined) return 0
  if (options.failOn === 'any' && marks['✗'] > 0) return 1
  return scenarios > 0 && marks['n/a'] === scenarios ? 3 : 0
}

/** Where progress lines go (stderr by the command). */
export type Log = (line: string) => void

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Runs `work` for each item, `concurrency` at a time, keeping the order of results. */
async function pool<T, R>(
  items: readonly T[],
  concurrency: number,
  work: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length)
  let next = 0
  const worker = async () => {
    while (next < items.length) {
      const index = next++
      results[index] = await work(items[index] as T, index)
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker))
  return results
}

/** A small seeded generator (mulberry32): the same seed plays the same fault mix. */
function seeded(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

const tenth = (ms: number | null) => (ms === null ? null : Math.round(ms * 10) / 10)

function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? null
}

function count(judged: readonly (OutcomeKind | 'left')[]): OutcomeCounts {
  const of = (...kinds: (OutcomeKind | 'left')[]) =>
    judged.filter((kind) => kinds.includes(kind)).length
  return {
    requests: judged.length,
    answered: of('full', 'promoted'),
    honestErrors: of('honest-error'),
    silentFailures: of('silent-empty', 'silent-cut'),
    duplicates: of('duplicate'),
    hangs: of('hang'),
  }
}

interface Harness {
  readonly options: ChaosOptions
  readonly upstream: FaultyUpstream
  readonly runId: string
  /** The gateway the command started, if it did. */
  readonly gateway: GatewayProcess | undefined
}

/** The last lines of the gateway's output (its own error, when it died), as a message's tail. */
function lastLinesOf(output: string): string {
  return output === ''
    ? ''
    : `\ngateway output (last lines):\n${output.split('\n').slice(-20).join('\n')}`
}

/** Stops the run when the started gateway exited: nothing after would be its answer. */
function checkGateway(harness: Harness): void {
  const exit = harness.gateway?.exited()
  if (exit === undefined) return
  const output = redactSecrets(harness.gateway?.output().trim() ?? '')
  throw new TargetUnreachableError(
    `the gateway exited mid-run (${exitWords(exit)})${lastLinesOf(output)}`,
  )
}

async function play(
  harness: Harness,
  scenario: ChaosScenario,
  requestId: string,
): Promise<{ run: ClientRun; judgement: Judgement }> {
  checkGateway(harness)
  const { options } = harness
  const adapter = protocolAdapters[options.protocol]
  const request = buildClientRequest(
    options.protocol,
    options.target,
    { scenario: scenario.name, requestId },
    options.headers,
    { model: options.model, path: options.path },
  )
  const run = await runClient(request, {
    adapter,
    hangMs: options.hangMs,
    action: scenario.client,
    pauseMs: Math.min(1000, Math.round(options.hangMs / 4)),
  })
  // No response from a gateway the command started: it may be dying. Its exit, not a row of
  // refused connections, is what the run reports.
  if (run.observation.status === null && harness.gateway !== undefined) {
    await harness.gateway.exitWithin(1_000)
    checkGateway(harness)
  }
  const judgement = await judgeObservation(run.observation, {
    adapter,
    answer: chaosAnswer,
    reasoning: chaosReasoning,
    otherAnswers: scenario.otherAnswers?.(chaosAnswer) ?? [],
  })
  return { run, judgement }
}

/** How long the upstream kept the request's streams open after the client left. */
async function heldAfterLeaving(
  upstream: FaultyUpstream,
  requestId: string,
  leftAt: number,
  waitMs: number,
): Promise<number> {
  const records = () => upstream.requests.filter((record) => record.requestId === requestId)
  const until = performance.now() + waitMs
  while (records().some((record) => record.endedAt === undefined) && performance.now() < until)
    await sleep(20)
  const ends = records().map((record) => record.endedAt ?? performance.now())
  return Math.max(0, ...ends.map((end) => end - leftAt))
}

/** Lets go within this long of the client leaving, or the scorecard marks it. */
const releaseBoundMs = 500

function mark(
  scenario: ChaosScenario,
  judgement: Judgement,
  attempts: number,
): Pick<ScenarioResult, 'mark' | 'reason'> {
  const { kind, reason } = judgement
  if (badOutcomes.has(kind)) return { mark: '✗', reason }
  if (attempts === 0)
    return { mark: 'n/a', reason: `the gateway never called the upstream (${reason})` }
  const answered = kind === 'full' || kind === 'promoted'
  if (scenario.expect === 'answer' && !answered)
    return { mark: '✗', reason: `${reason}, though a retry was still possible` }
  if (scenario.expect === 'error' && answered)
    return { mark: '✗', reason: `${reason}, though every upstream attempt failed` }
  return { mark: '✓', reason }
}

/** Writes what a scenario's client got into the `--dump` folder. */
async function dumpScenario(
  dir: string,
  name: string,
  run: ClientRun,
  judgement: Judgement,
): Promise<void> {
  await mkdir(dir, { recursive: true })
  const { body, ...observed } = run.observation
  const record = { scenario: name, ...observed, headers: run.headers, judgement }
  await writeFile(`${dir}/${name}.json`, `${JSON.stringify(record, null, 2)}\n`)
  await writeFile(`${dir}/${name}.body`, body)
}

async function scoreScenario(harness: Harness, scenario: ChaosScenario): Promise<ScenarioResult> {
  const requestId = `${harness.runId}-${scenario.name}`
  const { run, judgement } = await play(harness, scenario, requestId)
  const dump = harness.options.dump
  if (dump !== undefined) await dumpScenario(dump, scenario.name, run, judgement)
  const attempts = () =>
    harness.upstream.requests.filter((record) => record.requestId === requestId).length
  const base = {
    name: scenario.name,
    expect: scenario.expect,
    summary: scenario.summary,
    firstByteMs: tenth(run.firstByteMs),
    firstTokenMs: tenth(run.firstTokenMs),
  }
  if (scenario.client === 'disconnect' && run.leftAt !== null) {
    const held = await heldAfterLeaving(
      harness.upstream,
      requestId,
      run.leftAt,
      3 * releaseBoundMs + 3000,
    )
    const ok = held <= releaseBoundMs
    const reason = ok
      ? `the upstream was released ${Math.round(held)} ms after the client left`
      : `the upstream stream stayed open ${Math.round(held)} ms after the client left`
    return {
      ...base,
      outcome: 'left',
      mark: ok ? '✓' : '✗',
      reason,
      attempts: attempts(),
      upstreamHeldMs: held,
    }
  }
  if (scenario.client === 'disconnect' && !badOutcomes.has(judgement.kind)) {
    const reason = `no first token came, so the client could not leave mid-stream (${judgement.reason})`
    return {
      ...base,
      outcome: judgement.kind,
      mark: 'n/a',
      reason,
      attempts: attempts(),
      upstreamHeldMs: null,
    }
  }
  return {
    ...base,
    outcome: judgement.kind,
    ...mark(scenario, judgement, attempts()),
    attempts: attempts(),
    upstreamHeldMs: null,
  }
}

async function runScenarios(harness: Harness, log: Log): Promise<ScenarioResult[]> {
  const { scenarios, concurrency } = harness.options
  const ok = chaosScenarios.find((scenario) => scenario.name === 'ok') as ChaosScenario
  // One request first, unscored, so connection set-up and a cold JIT do not skew `ok`'s timings.
  await play(harness, ok, `${harness.runId}-warmup`)
  let done = 0
  return pool(scenarios, concurrency, async (scenario) => {
    const result = await scoreScenario(harness, scenario)
    log(`  [${++done}/${scenarios.length}] ${result.mark} ${scenario.name}: ${result.reason}`)
    return result
  })
}

function sampleMemory(gateway: GatewayProcess | undefined): {
  stop(): Promise<GatewayMemory | null>
} {
  const start = gateway?.rssBytes() ?? null
  if (gateway === undefined || start === null) return { stop: async () => null }
  let peak = start
  const timer = setInterval(() => {
    peak = Math.max(peak, gateway.rssBytes() ?? 0)
  }, 100)
  return {
    async stop() {
      clearInterval(timer)
      // A collector frees memory some time after the load ends: the lowest of 5 s is "after".
      let end = gateway.rssBytes() ?? 0
      for (let i = 0; i < 10; i++) {
        await sleep(500)
        end = Math.min(end, gateway.rssBytes() ?? end)
      }
      peak = Math.max(peak, end, gateway.peakRssBytes() ?? 0)
      return { startRssBytes: start, peakRssBytes: peak, endRssBytes: end }
    },
  }
}

async function runLoad(
  harness: Harness,
  gateway: GatewayProcess | undefined,
  log: Log,
): Promise<{ judged: OutcomeKind[]; load: LoadResult }> {
  const { options, upstream } = harness
  const total = options.requests ?? 0
  const random = seeded(options.seed)
  const ok = chaosScenarios.find((scenario) => scenario.name === 'ok') as ChaosScenario
  const mix = Array.from({ length: total }, () =>
    random() < options.faultRate
      ? (loadFaults[Math.floor(random() * loadFaults.length)] ?? ok)
      : ok,
  )
  const memory = sampleMemory(gateway)
  const started = performance.now()
  let done = 0
  const badExamples: { fault: string; reason: string }[] = []
  const runs = await pool(mix, options.concurrency, async (scenario, index) => {
    const { run, judgement } = await play(harness, scenario, `${harness.runId}-L${index}`)
    if (badOutcomes.has(judgement.kind) && badExamples.length < 5)
      badExamples.push({ fault: scenario.name, reason: `${judgement.kind}: ${judgement.reason}` })
    if (++done % Math.max(1, Math.round(total / 10)) === 0) log(`  ${done}/${total} requests`)
    return { run, judgement }
  })
  const elapsed = performance.now() - started
  const gatewayMemory = await memory.stop()
  const attempts = new Map<string, number>()
  for (const record of upstream.requests)
    if (record.requestId !== undefined)
      attempts.set(record.requestId, (attempts.get(record.requestId) ?? 0) + 1)
  const perRequest = mix.map((_, index) => attempts.get(`${harness.runId}-L${index}`) ?? 0)
  const tokens = runs
    .flatMap(({ run }) => (run.firstTokenMs === null ? [] : [run.firstTokenMs]))
    .sort((a, b) => a - b)
  return {
    judged: runs.map(({ judgement }) => judgement.kind),
    load: {
      byFault: perFault(
        mix,
        runs.map(({ judgement }) => judgement.kind),
      ),
      concurrency: options.concurrency,
      faultRate: options.faultRate,
      seed: options.seed,
      attemptsPerRequest: {
        mean: Math.round((perRequest.reduce((a, b) => a + b, 0) / Math.max(1, total)) * 100) / 100,
        max: Math.max(0, ...perRequest),
      },
      firstTokenMs: { p50: tenth(percentile(tokens, 50)), p99: tenth(percentile(tokens, 99)) },
      requestsPerSecond: Math.round(total / (elapsed / 1000)),
      gatewayMemory,
      badExamples,
    },
  }
}

/** What each fault's requests got in a load run, and how many missed its expectation. */
function perFault(
  mix: readonly ChaosScenario[],
  kinds: readonly OutcomeKind[],
): Record<string, OutcomeCounts & { missed: number }> {
  const by = new Map<ChaosScenario, OutcomeKind[]>()
  mix.forEach((scenario, index) => {
    const list = by.get(scenario) ?? []
    list.push(kinds[index] as OutcomeKind)
    by.set(scenario, list)
  })
  const out: Record<string, OutcomeCounts & { missed: number }> = {}
  for (const [scenario, list] of by) {
    const counts = count(list)
    const answered = counts.answered
    const missed =
      scenario.expect === 'answer'
        ? list.length - answered
        : scenario.expect === 'error'
          ? answered + counts.silentFailures + counts.duplicates + counts.hangs
          : counts.silentFailures + counts.duplicates + counts.hangs
    out[scenario.name] = { ...counts, missed }
  }
  return out
}

/** The command as it may be logged: values of credential-like variables and keys hidden. */
function redactCommand(command: string): string {
  return redactSecrets(
    command.replace(
      /\b([A-Za-z_][A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASS|AUTH|CREDENTIAL)[A-Za-z0-9_]*=)("[^"]*"|'[^']*'|\S+)/gi,
      '$1[redacted]',
    ),
  )
}

/** A gateway that could not be started or reached; exit code 2. */
export class TargetUnreachableError extends Error {
  override readonly name = 'TargetUnreachableError' as const
}

/** The options with `{upstream}` in the target and the header values replaced. */
function withUpstream(options: ChaosOptions, upstreamUrl: string): ChaosOptions {
  const fill = (value: string) => value.replaceAll('{upstream}', upstreamUrl)
  const headers = Object.fromEntries(
    Object.entries(options.headers).map(([name, value]) => [name, fill(value)]),
  )
  return { ...options, target: fill(options.target), headers }
}

/** Runs a whole chaos session and returns its report. */
export async function runChaos(given: ChaosOptions, log: Log): Promise<ChaosReport> {
  const started = performance.now()
  const upstream = createFaultyUpstream({
    scenarios: upstreamScripts(given.stallMs),
    text: chaosAnswer,
    reasoning: chaosReasoning,
    keepAliveMs: 200,
  })
  let gateway: GatewayProcess | undefined
  // The gateway runs in its own process group, out of reach of the terminal's Ctrl-C.
  const interrupt = (signal: NodeJS.Signals) => {
    gateway?.killNow()
    process.off('SIGINT', interrupt)
    process.off('SIGTERM', interrupt)
    process.kill(process.pid, signal)
  }
  process.once('SIGINT', interrupt)
  process.once('SIGTERM', interrupt)
  try {
    const upstreamUrl = await upstream.listen(given.upstreamPort)
    const options = withUpstream(given, upstreamUrl)
    log(
      `faulty upstream: ${upstreamUrl}  (OpenAI base ${upstreamUrl}/v1, Anthropic and Gemini base ${upstreamUrl})`,
    )
    if (options.gateway !== undefined) {
      // Something already listening would be scored in the started gateway's place.
      if (await portOpen(options.target)) {
        throw new TargetUnreachableError(
          `the target ${new URL(options.target).host} is already in use before the gateway was started: stop what listens there, or point --target at another port`,
        )
      }
      const command = options.gateway
        .replaceAll('{upstream}', upstreamUrl)
        .replaceAll('{selection}', options.selection ?? '')
      gateway = startGatewayProcess(
        command,
        options.selection === undefined ? {} : { KEY_SELECTION: options.selection },
      )
      log(`gateway: started pid ${gateway.pid}: ${redactCommand(command)}`)
    }
    try {
      await waitForPort(options.target, options.startTimeoutMs, gateway)
    } catch (error) {
      const output = redactSecrets(gateway?.output().trim() ?? '')
      throw new TargetUnreachableError(`${(error as Error).message}${lastLinesOf(output)}`)
    }
    const harness: Harness = {
      options,
      upstream,
      runId: `c${Date.now().toString(36)}`,
      gateway,
    }
    log(
      `target: ${options.target} (${options.protocol})${options.selection === undefined ? '' : `, key selection ${options.selection}`}`,
    )
    let scenarios: ScenarioResult[] = []
    let load: LoadResult | null = null
    let judged: (OutcomeKind | 'left')[]
    if (options.requests === undefined) {
      scenarios = await runScenarios(harness, log)
      judged = scenarios.map((result) => result.outcome)
    } else {
      const result = await runLoad(harness, gateway, log)
      load = result.load
      judged = result.judged
    }
    checkGateway(harness)
    const counts = count(judged)
    const marks = { '✓': 0, '✗': 0, 'n/a': 0 }
    for (const result of scenarios) marks[result.mark]++
    const exitCode = exitCodeOf(options, counts, marks, scenarios.length)
    return {
      hangMs: options.hangMs,
      marks,
      mode: options.requests === undefined ? 'scenarios' : 'load',
      target: options.target,
      protocol: options.protocol,
      ...(options.selection === undefined ? {} : { selection: options.selection }),
      upstream: upstreamUrl,
      scenarios,
      load,
      counts,
      durationMs: Math.round(performance.now() - started),
      exitCode,
      ...(exitCode === 3 ? { nothingJudged: nothingJudgedCause(given, upstreamUrl) } : {}),
    }
  } finally {
    process.off('SIGINT', interrupt)
    process.off('SIGTERM', interrupt)
    await gateway?.stop()
    await upstream.close()
  }
}
