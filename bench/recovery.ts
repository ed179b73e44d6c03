/**
 * @module
 * Recovery from an empty stream, over real HTTP on 127.0.0.1: a client's time to first token
 * through the example gateway (examples/node-http-gateway.ts, one key, the default policy)
 * when the upstream's first attempt is an empty stream (`200 text/event-stream` that ends with
 * no content) and the second answers, against a clean first answer. The extra is what the
 * library's default recovery costs the client: the pause before reusing the only key, and one
 * more upstream request.
 *
 * Runs in a process of its own, forked by bench/run.ts: the example gateway's "run me" check
 * compares `import.meta.url` with the entry, which are equal inside run.ts's bundle.
 */

import { startGateway } from '../examples/node-http-gateway.js'
import { chaosMarker } from '../src/testing/chaos-marker.js'
import { createFaultyUpstream } from '../src/testing/faulty-upstream.js'

interface RecoveryOptions {
  /** Measured requests per side, `clean` and `empty` taking turns one at a time. */
  readonly requests: number
  /** Unmeasured requests per side first (connections, JIT). */
  readonly warmUp: number
}

interface RecoverySide {
  readonly name: 'clean' | 'empty'
  readonly ttftP50Ms: number
  readonly ttftP90Ms: number
  /** Upstream requests per client request (1 clean, 2 when the empty stream is retried). */
  readonly upstreamPerRequest: number
  /** Client requests that were not answered 200 with the upstream's text. */
  readonly failed: number
}

export interface RecoveryResult extends RecoveryOptions {
  readonly clean: RecoverySide
  readonly empty: RecoverySide
  /** Empty median − clean median. */
  readonly extraP50Ms: number
  /** Empty p90 − clean p90. */
  readonly extraP90Ms: number
  /** Empty median / clean median. */
  readonly ratioP50: number
}

const scenarios = { clean: ['ok'], empty: ['empty', 'ok'] } as const
type ScenarioName = keyof typeof scenarios

/** The first delta with text: the role frame's `"content":""` is not one. */
const firstContent = /"content":"[^"]/

/**
 * One streaming request: milliseconds from send to the first chunk that brings delta text,
 * then the rest drained. `undefined` when it was not answered 200 with text.
 */
async function timeToFirstToken(url: string, scenario: ScenarioName, requestId: string) {
  // The marker counts attempts per request id, so every request starts at its first fault.
  const prompt = `Say hello. ${chaosMarker({ scenario, requestId })}`
  const started = performance.now()
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-client' },
    body: JSON.stringify({
      model: 'bench',
      stream: true,
      messages: [{ role: 'user', content: prompt }],
    }),
  })
  const decoder = new TextDecoder()
  let text = ''
  let ttft: number | undefined
  const reader = (response.body as ReadableStream<Uint8Array>).getReader()
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    text += decoder.decode(read.value, { stream: true })
    if (ttft === undefined && firstContent.test(text)) ttft = performance.now() - started
  }
  return response.status === 200 ? ttft : undefined
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}

async function benchRecovery(options: RecoveryOptions): Promise<RecoveryResult> {
  const upstream = createFaultyUpstream({ scenarios })
  const upstreamUrl = await upstream.listen()
  const gateway = await startGateway({
    openaiBaseUrl: `${upstreamUrl}/v1`,
    anthropicBaseUrl: upstreamUrl,
    keys: [{ id: 'only', secret: 'sk-bench-only' }],
  })
  const names = Object.keys(scenarios) as ScenarioName[]
  const ttft: Record<ScenarioName, number[]> = { clean: [], empty: [] }
  const failed: Record<ScenarioName, number> = { clean: 0, empty: 0 }
  /** Both sides once, in turn; the first side alternates so neither always follows the other. */
  const round = async (i: number, measured: boolean) => {
    for (const name of i % 2 === 0 ? names : [...names].reverse()) {
      const ms = await timeToFirstToken(gateway.url, name, `${name}-${i}`)
      if (!measured) continue
      if (ms === undefined) failed[name]++
      else ttft[name].push(ms)
    }
  }
  try {
    for (let i = 0; i < options.warmUp; i++) await round(i, false)
    // The upstream's record from here on holds the measured requests only.
    upstream.reset()
    for (let i = 0; i < options.requests; i++) await round(options.warmUp + i, true)
  } finally {
    await gateway.close()
    await upstream.close()
  }
  const side = (name: ScenarioName): RecoverySide => {
    const sorted = [...ttft[name]].sort((a, b) => a - b)
    const attempts = upstream.requests.filter((r) => r.scenario === name).length
    return {
      name,
      ttftP50Ms: quantile(sorted, 0.5),
      ttftP90Ms: quantile(sorted, 0.9),
      upstreamPerRequest: attempts / options.requests,
      failed: failed[name],
    }
  }
  const clean = side('clean')
  const empty = side('empty')
  return {
    ...options,
    clean,
    empty,
    extraP50Ms: empty.ttftP50Ms - clean.ttftP50Ms,
    extraP90Ms: empty.ttftP90Ms - clean.ttftP90Ms,
    ratioP50: empty.ttftP50Ms / clean.ttftP50Ms,
  }
}

// Forked by bench/run.ts with `recovery <requests> <warmUp>`: measure, send the result, exit.
if (process.send !== undefined && process.argv[2] === 'recovery') {
  const [requests, warmUp] = process.argv.slice(3).map(Number) as [number, number]
  const result = await benchRecovery({ requests, warmUp })
  process.send(result, () => process.exit(0))
}
