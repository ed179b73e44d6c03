/**
 * `examples/node-http-gateway.ts` with timeouts short enough for a chaos run: a stream that
 * sends nothing for 1 s, or no output for 1.5 s, is given up and retried on another key, and
 * a request gets 10 s in all; 16 requests may be before their first output at once, the rest
 * wait their turn.
 * The CI chaos step starts it as the gateway under test.
 *
 *   UPSTREAM_URL=http://127.0.0.1:9000 PORT=8787 node --import tsx test/cli/example-gateway.ts
 *
 * `UPSTREAM_CLIENT=fetch` or `UPSTREAM_CLIENT=node:http` picks how attempts reach the upstream.
 * `KEY_SELECTION` picks the pools' selection (the chaos command's `--selection` sets it).
 * `CONTINUE_AFTER_CUT=1` turns `continueAfterCut` on (Chat in the `vllm-continue` dialect, which
 * the faulty upstream speaks): run the chaos command with `--expect-continuation` then.
 */

import { pathToFileURL } from 'node:url'
import { type GatewayConfig, startGateway } from '../../examples/node-http-gateway.js'
import type { KeySelection, RelayPolicy } from '../../src/index.js'

/** The policy of the chaos runs. */
const chaosPolicy: RelayPolicy = {
  maxAttempts: 4,
  // Any real gateway bounds a request; the chaos run's hang bound is longer than this.
  deadlineMs: 10_000,
  peek: { firstByteTimeoutMs: 1000, firstOutputTimeoutMs: 1500 },
  backoff: { baseMs: 20 },
}

/** Starts the example gateway in front of `upstream` with {@link chaosPolicy} and four keys. */
export function startChaosGateway(
  upstream: string,
  port = 0,
  upstreamClient?: GatewayConfig['upstreamClient'],
  continueAfterCut = false,
  selection?: KeySelection,
) {
  return startGateway({
    openaiBaseUrl: `${upstream}/v1`,
    anthropicBaseUrl: upstream,
    keys: ['a', 'b', 'c', 'd'].map((id) => ({ id, secret: `sk-chaos-${id}-not-real` })),
    policy: continueAfterCut ? { ...chaosPolicy, continueAfterCut: true } : chaosPolicy,
    ...(continueAfterCut ? { openaiContinuation: 'vllm-continue' as const } : {}),
    // The chaos upstream shares its process with 300 clients (and, in CI, two cores with this
    // gateway): past ~16 pending streams at once its answers cross the 1 s first-byte bound and cost
    // retries (32: 81-140 first-byte timeouts a run, 16: ~40, as many as the hung faults).
    maxPendingStreams: 16,
    port,
    ...(upstreamClient === undefined ? {} : { upstreamClient }),
    ...(selection === undefined ? {} : { selection }),
  })
}

/** `UPSTREAM_CLIENT=fetch|node:http` picks the attempts' client; unset: the example's default. */
function clientFromEnv(value: string | undefined): GatewayConfig['upstreamClient'] {
  if (value === undefined || value === '') return undefined
  if (value === 'fetch' || value === 'node:http') return value
  throw new Error(`UPSTREAM_CLIENT must be fetch or node:http, got ${JSON.stringify(value)}`)
}

const entry = process.argv[1]
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  const upstream = process.env.UPSTREAM_URL
  if (upstream === undefined || upstream === '') throw new Error('UPSTREAM_URL is not set')
  const gateway = await startChaosGateway(
    upstream,
    Number(process.env.PORT ?? 8787),
    clientFromEnv(process.env.UPSTREAM_CLIENT),
    process.env.CONTINUE_AFTER_CUT === '1',
    process.env.KEY_SELECTION ? (process.env.KEY_SELECTION as KeySelection) : undefined,
  )
  console.log(`example gateway listening on ${gateway.url}`)
  // Under `node --expose-gc`, collect every second, so the chaos run's RSS figures show memory
  // still held (a leak), not garbage the collector has not got round to yet.
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc !== undefined) setInterval(gc, 1000).unref()
}
