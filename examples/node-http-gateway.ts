/**
 * A stream-boundary gateway on Node's `http` module alone. OpenAI-compatible
 * `POST /v1/chat/completions` and `POST /v1/responses`, Anthropic-compatible `POST /v1/messages`.
 * Streaming requests are retried over a key pool until the first byte the client sees, then
 * relayed to an honest end; non-streaming requests go through the same relay (same keys,
 * bounds, retries and give-up answers) and get the upstream's JSON answer as it came.
 * The client's own credential is ignored: the gateway's keys are used.
 *
 * Safe for many clients by default: request bodies past `maxRequestBodyBytes` are answered
 * `413` before any upstream attempt (and not read further), and only the upstream headers the
 * `forwardHeaders` allowlist names reach clients (request ids yes; the upstream account's
 * organization and project ids and one key's rate-limit budget no).
 *
 * Run it:
 *   UPSTREAM_OPENAI_URL=https://api.openai.com/v1 UPSTREAM_ANTHROPIC_URL=https://api.anthropic.com \
 *   GATEWAY_KEYS=primary:sk-...,backup:sk-... PORT=8787 node --import tsx examples/node-http-gateway.ts
 */

import {
  createServer,
  Agent as HttpAgent,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http'
import { Agent as HttpsAgent } from 'node:https'
import type { AddressInfo } from 'node:net'
import { pathToFileURL } from 'node:url'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createRelay,
  type ForwardHeadersPolicy,
  fetchAttempt,
  type KeyPool,
  type KeySelection,
  type KeyStateEvent,
  openaiChatWith,
  openaiResponses,
  type PoolKey,
  type RelayHooks,
  type RelayOutcome,
  type RelayPolicy,
  type StreamAdapter,
} from 'stream-boundary'
import {
  forwardHeadersDefaults,
  type OpenAIChatContinuation,
  readyAttemptDefaults,
  requestBodyDefaults,
} from 'stream-boundary/advanced'
import { nodeHttpAttempt, nodeSink, readNodeRequest } from 'stream-boundary/node'

export interface GatewayConfig {
  /** e.g. `https://api.openai.com/v1`: `/chat/completions` and `/responses` are appended. */
  openaiBaseUrl: string
  /** e.g. `https://api.anthropic.com`: `/v1/messages` is appended. */
  anthropicBaseUrl: string
  keys: PoolKey[]
  policy?: RelayPolicy
  hooks?: RelayHooks
  /** Told every key state change of the gateway's pools (e.g. `telemetry.onKeyState`). */
  onKeyState?: (event: KeyStateEvent) => void
  /** How the pools pick a key (`KEY_SELECTION` when run as a script). @default 'round-robin' */
  selection?: KeySelection
  /** @default 0 (an ephemeral port) */
  port?: number
  /**
   * Which upstream response headers clients see. This gateway's choice is the library's
   * default, spelled out: request ids, processing time and `retry-after`; never the upstream
   * account's ids; per-key rate-limit headers only with `rateLimit: true`.
   * @default forwardHeadersDefaults
   */
  forwardHeaders?: ForwardHeadersPolicy
  /**
   * Request bodies past this are answered `413` in the client's protocol, before any upstream
   * attempt, and are not read further.
   * @default requestBodyDefaults.maxRequestBodyBytes (32 MiB)
   */
  maxRequestBodyBytes?: number
  /**
   * How streaming attempts reach the upstream: `node:http` (Node streams, read by the relay as
   * they are, over this gateway's own keep-alive agent), `fetch` (web streams, undici's
   * connection pool), or a fetch-like function of your own. `node:http` costs ~25 % less CPU
   * per relayed frame (see docs/performance.md).
   * @default 'node:http'
   */
  upstreamClient?: 'node:http' | 'fetch' | UpstreamClient
  /**
   * Streaming requests before their first output at once (attempting, retrying, waiting for a
   * key); the rest wait their turn before their first attempt, so the wait counts against no
   * timeout. A request leaves the count at its first output: relayed streams are not bounded
   * here. Without it, a burst of requests in front of an upstream that answers slower than the
   * first-byte bound turns into a retry storm: each cut attempt costs the upstream a new
   * connection and a request it still serves, so it falls further behind (under the chaos
   * load: 13–670 of 2,000 answered). Set it to what one upstream takes at once from this
   * process.
   * @default 32
   */
  maxPendingStreams?: number
  /**
   * The OpenAI upstream's dialect for continuing a cut answer (DeepSeek, Mistral, vLLM), so
   * `policy.continueAfterCut` applies to `/v1/chat/completions` too (Anthropic's prefill
   * needs nothing). Name one only for a server that documents it: OpenAI's API has none.
   * @default undefined (Chat answers cut after output end with the honest error)
   */
  openaiContinuation?: OpenAIChatContinuation
}

/** A fetch-like function for attempts (`fetchAttempt`'s `fetch`). */
export type UpstreamClient = (
  url: string,
  init: {
    method: string
    headers: Record<string, string>
    body: string
    signal: AbortSignal
    redirect?: 'manual'
  },
) => Promise<Response>

/** The client headers sent upstream: the library's allowlist, and the faulty upstream's scenario header for tests. */
const forwardedHeaders = [...readyAttemptDefaults.forwardHeaders, 'x-fault-scenario']

/** Parses `"id:secret,id:secret"`; a secret may itself hold colons. */
export function keysFromEnv(value: string | undefined): PoolKey[] {
  const entries = (value ?? '').split(',').filter((entry) => entry.trim() !== '')
  return entries.map((entry, index) => {
    const [id = '', ...rest] = entry.trim().split(':')
    // The message names the position only: the entry holds a secret.
    if (id === '' || rest.join(':') === '')
      throw new Error(`GATEWAY_KEYS entry ${index + 1} is not of the form id:secret`)
    return { id, secret: rest.join(':') }
  })
}

/** At most `limit` holders at once; the rest wait in arrival order. Each holder's release runs once. */
function slots(limit: number): { acquire(): Promise<() => void> } {
  let used = 0
  const waiting: (() => void)[] = []
  const next = () => {
    const first = waiting.shift()
    if (first === undefined) used--
    else first()
  }
  const holder = () => {
    let held = true
    return () => {
      if (!held) return
      held = false
      next()
    }
  }
  return {
    acquire() {
      if (used < limit) {
        used++
        return Promise.resolve(holder())
      }
      return new Promise((resolve) => waiting.push(() => resolve(holder())))
    },
  }
}

/** The last outcomes the gateway keeps (for a dashboard or a test); older ones are dropped. */
const keptOutcomes = 1_000

export async function startGateway(config: GatewayConfig): Promise<{
  url: string
  close(): Promise<void>
  /** The last 1,000 relay outcomes, oldest first (a long-running gateway keeps no more). */
  outcomes: RelayOutcome[]
  /** The gateway's key pools, for stats. */
  pools: { openai: KeyPool; anthropic: KeyPool }
}> {
  const outcomes: RelayOutcome[] = []
  const forwardHeaders = config.forwardHeaders ?? forwardHeadersDefaults
  const maxRequestBodyBytes = config.maxRequestBodyBytes ?? requestBodyDefaults.maxRequestBodyBytes
  const client = config.upstreamClient ?? 'node:http'
  const maxPendingStreams = config.maxPendingStreams ?? 32
  if (!(maxPendingStreams >= 1))
    throw new RangeError(`maxPendingStreams must be at least 1, got ${maxPendingStreams}`)
  const pending = slots(maxPendingStreams)
  // This gateway's own keep-alive agents (newest free connection first), closed with it.
  const agents =
    client === 'node:http'
      ? {
          http: new HttpAgent({ keepAlive: true, scheduling: 'lifo' }),
          https: new HttpsAgent({ keepAlive: true, scheduling: 'lifo' }),
        }
      : undefined
  // The ready attempts: each attempt's own request, the route's credential header for the
  // leased key, the allowlisted client headers, no redirect followed.
  const attemptFor = (clientHeaders: IncomingMessage['headers']) => {
    const options = { clientHeaders, forwardHeaders: forwardedHeaders }
    if (client === 'node:http') return nodeHttpAttempt({ ...options, agents })
    if (client === 'fetch') return fetchAttempt(options)
    return fetchAttempt({
      ...options,
      fetch: (url, init) => client(url, init as Parameters<UpstreamClient>[1]),
    })
  }
  // The relay hands policy.forwardHeaders to its commit gate.
  const policy = { ...config.policy, forwardHeaders }
  // Each endpoint's relay is built once: its policy is checked here (a bad one throws now,
  // not on a request), and its requests bring only their sink, body and attempt function.
  const endpoint = (url: string, adapter: StreamAdapter, pool: KeyPool) => ({
    url,
    adapter,
    relay: createRelay({
      pool,
      adapter,
      policy,
      ...(config.hooks === undefined ? {} : { hooks: config.hooks }),
    }),
  })
  const poolOptions = {
    ...(config.onKeyState === undefined ? {} : { onKeyState: config.onKeyState }),
    ...(config.selection === undefined ? {} : { selection: config.selection }),
  }
  const openai = createMemoryKeyPool(config.keys, poolOptions)
  const anthropic = createMemoryKeyPool(config.keys, poolOptions)
  const { openaiBaseUrl, anthropicBaseUrl } = config
  const endpoints = new Map<string, ReturnType<typeof endpoint>>([
    [
      '/v1/chat/completions',
      endpoint(
        `${openaiBaseUrl}/chat/completions`,
        openaiChatWith({ continuation: config.openaiContinuation }),
        openai,
      ),
    ],
    ['/v1/responses', endpoint(`${openaiBaseUrl}/responses`, openaiResponses, openai)],
    ['/v1/messages', endpoint(`${anthropicBaseUrl}/v1/messages`, anthropicMessages, anthropic)],
  ])

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // A request line naming a route exactly is routed without parsing it as a URL.
    const requestUrl = req.url ?? '/'
    const exact = endpoints.get(requestUrl)
    const path = exact === undefined ? new URL(requestUrl, 'http://gateway').pathname : requestUrl
    const target = req.method === 'POST' ? (exact ?? endpoints.get(path)) : undefined
    if (target === undefined) {
      res.writeHead(404, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { type: 'not_found', message: `no route for ${path}` } }))
      return
    }
    // Read whole within the bound, UTF-8 decoded once, parsed and checked: a body past the
    // bound is answered 413 (and not read further), an invalid one 400, in the client's
    // protocol, before any upstream attempt. The body is kept frozen with the client's bytes:
    // an attempt that sends it unchanged sends those bytes, not the body serialised again.
    const body = await readNodeRequest(req, res, {
      adapter: target.adapter,
      maxRequestBodyBytes,
      keepClientBytes: true,
    })
    if (body === undefined) return
    // Bounded before the first output only: a relayed stream gives its place up at commit (a
    // whole answer's output is the answer).
    const release = await pending.acquire()
    // A client that left while its request waited costs no attempt.
    if (res.destroyed) return release()
    const outcome = await target
      .relay({
        // nodeSink watches the client: a client that leaves ends the relay as client-gone.
        sink: nodeSink(res),
        // Called after the gateway's own hooks.
        hooks: { onCommit: release },
        // The body as JSON lets the relay adjust it or fall back to a non-streaming request, and
        // says whether the client asked for a stream: a `stream: false` request is relayed by
        // the same engine and answered with the upstream's JSON as it came.
        request: { url: target.url, body },
        attempt: attemptFor(req.headers),
      })
      .finally(release)
    outcomes.push(outcome)
    if (outcomes.length > keptOutcomes) outcomes.shift()
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      // Only a vanished client (or a bug) lands here: relay() answers every upstream failure.
      if (res.headersSent || res.destroyed) return void res.destroy()
      const error = { type: 'upstream_error', message: 'the upstream request failed' }
      res.writeHead(502, { 'content-type': 'application/json' }).end(JSON.stringify({ error }))
    })
  })
  await new Promise<void>((resolve) => server.listen(config.port ?? 0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    outcomes,
    pools: { openai, anthropic },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
        agents?.http.destroy()
        agents?.https.destroy()
      }),
  }
}

/**
 * With `PROMETHEUS_PORT` set, the gateway's OpenTelemetry metrics (`stream-boundary/otel`)
 * are served for Prometheus to scrape at `http://127.0.0.1:<port>/metrics`.
 */
async function prometheusTelemetry(
  port: string | undefined,
): Promise<Pick<GatewayConfig, 'hooks' | 'onKeyState'>> {
  if (port === undefined || port === '') return {}
  const { PrometheusExporter } = await import('@opentelemetry/exporter-prometheus')
  const { MeterProvider } = await import('@opentelemetry/sdk-metrics')
  const { createRelayTelemetry } = await import('stream-boundary/otel')
  const exporter = new PrometheusExporter({ port: Number(port), host: '127.0.0.1' })
  const telemetry = createRelayTelemetry({
    meterProvider: new MeterProvider({ readers: [exporter] }),
  })
  console.log(`metrics for Prometheus on http://127.0.0.1:${port}/metrics`)
  return { hooks: telemetry.hooks, onKeyState: telemetry.onKeyState }
}

const entry = process.argv[1]
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  const gateway = await startGateway({
    openaiBaseUrl: process.env.UPSTREAM_OPENAI_URL ?? 'https://api.openai.com/v1',
    anthropicBaseUrl: process.env.UPSTREAM_ANTHROPIC_URL ?? 'https://api.anthropic.com',
    keys: keysFromEnv(process.env.GATEWAY_KEYS),
    port: Number(process.env.PORT ?? 8787),
    ...(process.env.KEY_SELECTION ? { selection: process.env.KEY_SELECTION as KeySelection } : {}),
    // CONTINUE_AFTER_CUT=1 continues answers cut after output (Anthropic; Chat with a dialect).
    ...(process.env.CONTINUE_AFTER_CUT === '1' ? { policy: { continueAfterCut: true } } : {}),
    ...(process.env.UPSTREAM_OPENAI_CONTINUATION
      ? { openaiContinuation: process.env.UPSTREAM_OPENAI_CONTINUATION as OpenAIChatContinuation }
      : {}),
    ...(await prometheusTelemetry(process.env.PROMETHEUS_PORT)),
  })
  console.log(`stream-boundary gateway listening on ${gateway.url}`)
}
