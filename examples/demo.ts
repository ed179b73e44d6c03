/**
 * `npm run demo`: on an embedded fault-injecting upstream (127.0.0.1, no network, no keys),
 * drive the official `openai` and `@anthropic-ai/sdk` clients through the failures LLM
 * upstreams really have, once through a plain pass-through relay and once through the
 * stream-boundary example gateway, and print what each client got, side by side.
 */

import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { createHedging, type RelayOutcome, type RelayPolicy } from 'stream-boundary'
import { createFaultyUpstream, type Scenario } from 'stream-boundary/testing'
import { startGateway } from './node-http-gateway.js'
import { startPlainRelay } from './plain-relay.js'

interface DemoScenario {
  readonly title: string
  readonly client: 'openai' | 'anthropic'
  readonly script: Scenario
}

const scenarios: readonly DemoScenario[] = [
  { title: 'empty EOF (tunnel killed in prefill)', client: 'openai', script: ['empty', 'ok'] },
  {
    title: 'hung prefill (headers, then nothing)',
    client: 'anthropic',
    script: ['headers-then-hang', 'ok'],
  },
  { title: 'keep-alives, then silence', client: 'openai', script: ['keepalives-only', 'ok'] },
  { title: 'error frame before output', client: 'anthropic', script: ['error-frame', 'ok'] },
  {
    title: '429 retry-after 20 s on one key',
    client: 'openai',
    script: [{ kind: 'rate-limited', retryAfterSeconds: 20 }, 'ok'],
  },
  { title: 'partial output, then cut', client: 'openai', script: ['partial-then-cut', 'ok'] },
  { title: 'thinking, then EOF (no answer)', client: 'anthropic', script: ['thinking-only', 'ok'] },
]

/** The hedging scenario: the first attempt stalls in prefill, any later one answers. */
const stuckInPrefill: Scenario = ['role-only-then-stall', 'ok']
const hedgeAfterMs = 300
const firstOutputTimeoutMs = 1200

const answer = 'The quick brown fox jumps over the lazy dog.'
const clientTimeoutMs = 4000

const reasoning = 'Let me think about this step by step.'

interface ClientResult {
  readonly verdict: 'correct' | 'promoted' | 'wrong' | 'error'
  readonly detail: string
  readonly firstTokenMs: number | undefined
}

function describeError(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error)
  const status = (error as { status?: unknown }).status
  const text =
    typeof status === 'number' && !message.startsWith(String(status))
      ? `${status} ${message}`
      : message
  return text.replace(/\s+/g, ' ')
}

function shorten(text: string, length: number): string {
  return text.length > length ? `${text.slice(0, length - 1)}…` : text
}

/** What the app calling the SDK ends up with. */
function judge(
  text: string,
  error: unknown,
  signal: AbortSignal,
  started: number,
  firstToken: number | undefined,
): ClientResult {
  const firstTokenMs = firstToken === undefined ? undefined : firstToken - started
  // The SDKs end a stream quietly when the caller aborts it; the app still has no answer.
  if (signal.aborted)
    return {
      verdict: 'error',
      detail: `no answer in ${clientTimeoutMs / 1000} s, gave up`,
      firstTokenMs,
    }
  if (error !== undefined) return { verdict: 'error', detail: describeError(error), firstTokenMs }
  if (text === answer) return { verdict: 'correct', detail: 'full answer', firstTokenMs }
  if (text === reasoning)
    return { verdict: 'promoted', detail: 'reasoning promoted to the answer', firstTokenMs }
  if (text === '') return { verdict: 'wrong', detail: 'empty answer, no error', firstTokenMs }
  return { verdict: 'wrong', detail: `cut answer, no error: "${shorten(text, 16)}"`, firstTokenMs }
}

async function runOpenAI(baseURL: string, scenario: string): Promise<ClientResult> {
  const client = new OpenAI({
    apiKey: 'sk-demo',
    baseURL: `${baseURL}/v1`,
    maxRetries: 0,
    defaultHeaders: { 'x-fault-scenario': scenario },
  })
  // SDK timeouts stop at the response headers: a stream that hangs after them needs the
  // caller's own deadline.
  const signal = AbortSignal.timeout(clientTimeoutMs)
  const started = performance.now()
  let firstToken: number | undefined
  let text = ''
  try {
    const stream = await client.chat.completions.create(
      { model: 'demo', messages: [{ role: 'user', content: 'Say the pangram.' }], stream: true },
      { signal },
    )
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta?.content ?? ''
      if (delta !== '') firstToken ??= performance.now()
      text += delta
    }
  } catch (error) {
    return judge(text, error, signal, started, firstToken)
  }
  return judge(text, undefined, signal, started, firstToken)
}

async function runAnthropic(baseURL: string, scenario: string): Promise<ClientResult> {
  const client = new Anthropic({
    apiKey: 'sk-ant-demo',
    baseURL,
    maxRetries: 0,
    defaultHeaders: { 'x-fault-scenario': scenario },
  })
  const signal = AbortSignal.timeout(clientTimeoutMs)
  const started = performance.now()
  let firstToken: number | undefined
  try {
    const stream = client.messages.stream(
      {
        model: 'claude-demo',
        max_tokens: 256,
        messages: [{ role: 'user', content: 'Say the pangram.' }],
      },
      { signal },
    )
    stream.on('text', () => {
      firstToken ??= performance.now()
    })
    const message = await stream.finalMessage()
    const text = message.content.map((block) => (block.type === 'text' ? block.text : '')).join('')
    return judge(text, undefined, signal, started, firstToken)
  } catch (error) {
    return judge('', error, signal, started, firstToken)
  }
}

const mark = { correct: '✓', promoted: '~', wrong: '✗', error: '!' } as const

function cell(result: ClientResult, width: number, outcome?: RelayOutcome): string {
  const ttft =
    result.firstTokenMs === undefined ? '' : `, first token ${Math.round(result.firstTokenMs)} ms`
  // `→` a retry after a failure; `∥` a hedge running alongside the attempt it hedges.
  const keys = outcome?.attempts
    .map(
      (attempt, index) =>
        `${index === 0 ? '' : attempt.hedgeOf === undefined ? ' → ' : ' ∥ '}${attempt.keyId ?? '-'}`,
    )
    .join('')
  const attempts = outcome === undefined ? '' : ` (${keys}${ttft})`
  return `${mark[result.verdict]} ${shorten(result.detail, width - attempts.length - 2)}${attempts}`
}

/**
 * One key stuck in prefill, through two fresh gateways (the table's rate-limited key would
 * still be cooling): without `policy.hedge` the request waits on that key until the
 * first-output timeout; with it, a hedge on the other key starts after `hedgeAfterMs`, wins,
 * and the stuck attempt is cancelled.
 */
async function showHedging(config: Parameters<typeof startGateway>[0]): Promise<void> {
  process.stderr.write('  [hedging] one key stuck in prefill…\n')
  const unhedged = await startGateway(config)
  // Budget 1 lets this single request hedge (the default, 0.1, allows one in ten requests).
  const hedge = createHedging({ afterMs: hedgeAfterMs, budget: 1 })
  const hedged = await startGateway({ ...config, policy: { ...config.policy, hedge } })
  const [withoutHedge, withHedge] = await Promise.all([
    runOpenAI(unhedged.url, 'hedge:unhedged'),
    runOpenAI(hedged.url, 'hedge:hedged'),
  ])
  await unhedged.close()
  await hedged.close()
  const hedgedOutcome = hedged.outcomes.at(-1)
  const lost = hedgedOutcome?.attempts.find((attempt) => attempt.result === 'hedge-lost')
  const won = hedgedOutcome?.attempts.find((attempt) => attempt.result === 'committed')
  const rows: [string, string, string][] = [
    [
      'no hedging',
      cell(withoutHedge, 60, unhedged.outcomes.at(-1)),
      `waits on the stuck key until the first-output timeout (${firstOutputTimeoutMs} ms), then retries`,
    ],
    [
      `policy.hedge, afterMs ${hedgeAfterMs}`,
      cell(withHedge, 60, hedgedOutcome),
      lost === undefined || won === undefined
        ? 'no hedge was cancelled'
        : `at ${hedgeAfterMs} ms a hedge starts on ${won.keyId}; ${won.hedgeOf === undefined ? 'the first attempt' : 'the hedge'} wins, ${lost.keyId} is cancelled after ${Math.round(lost.durationMs)} ms (lease reported cancelled, not a key failure)`,
    ],
  ]
  console.log('')
  console.log(
    'hedging: one key stuck in prefill (headers and the role preamble, then nothing) [openai]',
  )
  const headers: [string, string, string] = [
    'gateway',
    'what the app got (keys, first token)',
    'what happened',
  ]
  printTable(headers, rows)
  console.log('→ a retry after a failure   ∥ a hedge running alongside the attempt it hedges')
}

/** Prints `rows` under `headers` in padded columns, with a rule under the headers. */
function printTable(headers: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...rows.map((row) => row[column]?.length ?? 0)),
  )
  const line = (row: readonly string[]) =>
    row
      .map((text, column) => text.padEnd(widths[column] ?? 0))
      .join('  ')
      .trimEnd()
  console.log(line(headers))
  console.log(line(widths.map((width) => '─'.repeat(width))))
  for (const row of rows) console.log(line(row))
}

async function main(): Promise<void> {
  const started = performance.now()
  const scripts: Record<string, Scenario> = {}
  for (const [index, scenario] of scenarios.entries()) {
    scripts[`${index}:plain`] = scenario.script
    scripts[`${index}:gateway`] = scenario.script
  }
  scripts['hedge:unhedged'] = stuckInPrefill
  scripts['hedge:hedged'] = stuckInPrefill
  const upstream = createFaultyUpstream({
    scenarios: scripts,
    text: answer,
    reasoning,
    frameDelayMs: 5,
    keepAliveMs: 200,
  })
  const upstreamUrl = await upstream.listen()
  const plain = await startPlainRelay(upstreamUrl)
  const keys = [
    { id: 'key-a', secret: 'sk-demo-key-a-not-real' },
    { id: 'key-b', secret: 'sk-demo-key-b-not-real' },
  ]
  const policy: RelayPolicy = {
    maxAttempts: 3,
    peek: { firstByteTimeoutMs: 800, firstOutputTimeoutMs },
    onThinkingOnly: 'promote-reasoning',
    backoff: { baseMs: 50 },
  }
  const gateway = await startGateway({
    openaiBaseUrl: `${upstreamUrl}/v1`,
    anthropicBaseUrl: upstreamUrl,
    keys,
    policy,
  })

  console.log(
    'stream-boundary demo: one fault-injecting upstream on 127.0.0.1, two relays in front of it',
  )
  console.log(`  plain relay   ${plain.url}  writes the upstream's 200 at once and pipes its bytes`)
  console.log(
    `  gateway       ${gateway.url}  examples/node-http-gateway.ts: createRelay() over 2 keys`,
  )
  console.log('')

  const rows: [string, string, string][] = []
  const tally = { plain: 0, correct: 0, promoted: 0, honest: 0 }
  for (const [index, scenario] of scenarios.entries()) {
    process.stderr.write(`  [${index + 1}/${scenarios.length}] ${scenario.title}…\n`)
    const run = scenario.client === 'openai' ? runOpenAI : runAnthropic
    const before = gateway.outcomes.length
    const [viaPlain, viaGateway] = await Promise.all([
      run(plain.url, `${index}:plain`),
      run(gateway.url, `${index}:gateway`),
    ])
    const outcome = gateway.outcomes.slice(before).at(-1)
    if (viaPlain.verdict === 'correct') tally.plain++
    if (viaGateway.verdict === 'correct') tally.correct++
    if (viaGateway.verdict === 'promoted') tally.promoted++
    if (viaGateway.verdict === 'error') tally.honest++
    rows.push([
      `${scenario.title} [${scenario.client}]`,
      cell(viaPlain, 44),
      cell(viaGateway, 88, outcome),
    ])
  }

  const headers: [string, string, string] = [
    'scenario [client]',
    'plain pass-through relay',
    'stream-boundary gateway (keys, first token)',
  ]
  printTable(headers, rows)
  console.log('')
  console.log(
    `plain relay:      ${tally.plain}/${scenarios.length} apps got the answer; the rest got nothing, a cut answer without an error, or a raw upstream error`,
  )
  console.log(
    `stream-boundary:  ${tally.correct}/${scenarios.length} got the answer, ${tally.promoted} got the reasoning as the answer (policy), ${tally.honest} an honest error because output had already been sent`,
  )
  console.log(
    '✓ answer   ~ reasoning promoted   ✗ wrong or empty answer, no error   ! error in the app',
  )

  await showHedging({
    openaiBaseUrl: `${upstreamUrl}/v1`,
    anthropicBaseUrl: upstreamUrl,
    keys,
    policy,
  })
  console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s)`)

  await gateway.close()
  await plain.close()
  await upstream.close()
}

await main()
