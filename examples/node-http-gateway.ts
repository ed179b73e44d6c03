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

import { Buffer } from 'node:buffer'
import {
  createServer,
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import type { AddressInfo } from 'node:net'
import { pathToFileURL, urlToHttpOptions } from 'node:url'
import {
  anthropicMessages,
  createMemoryKeyPool,
  type ForwardHeadersPolicy,
  isFirstPartyApi,
  type KeyPool,
  type KeyStateEvent,
  type OpenAIChatContinuation,
  openaiChatWith,
  openaiResponses,
  type PoolKey,
  type RelayHooks,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  type StreamAdapter,
} from 'stream-boundary'
import { forwardHeadersDefaults, requestBodyDefaults } from 'stream-boundary/advanced'
import { nodeResponse, nodeSink } from 'stream-boundary/node'

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

/** A fetch-like function for streaming attempts. */
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

/** The keep-alive agents of {@link nodeFetch}, one per scheme. */
export interface UpstreamAgents {
  readonly http: HttpAgent
  readonly https: HttpsAgent
}

/**
 * Keep-alive agents that reuse the most recently freed connection first (as undici's pool
 * does). They put no cap on connections: an attempt waiting for a socket would wait inside its
 * first-byte clock, and relayed streams each hold one; `maxPendingStreams` bounds the churn.
 */
export function upstreamAgents(): UpstreamAgents {
  const options = { keepAlive: true, scheduling: 'lifo' as const }
  return { http: new HttpAgent(options), https: new HttpsAgent(options) }
}

/** Node's request options of a URL, kept per URL (at most 64): parsing it costs more than the rest of the request's set-up. */
const urlOptions = new Map<string, ReturnType<typeof urlToHttpOptions>>()

function requestOptionsOf(url: string): ReturnType<typeof urlToHttpOptions> {
  let options = urlOptions.get(url)
  if (options === undefined) {
    options = urlToHttpOptions(new URL(url))
    if (urlOptions.size >= 64) urlOptions.clear()
    urlOptions.set(url, options)
  }
  return options
}

/**
 * One upstream request over `node:http` / `node:https`, answered as a `Response` whose body the
 * relay reads as the Node stream it is (`nodeResponse`), with no web stream in between.
 */
export function nodeFetch(
  url: string,
  init: { method: string; headers: Record<string, string>; body: string; signal: AbortSignal },
  answer: (res: IncomingMessage) => Response = nodeResponse,
  agents?: UpstreamAgents,
): Promise<Response> {
  return new Promise((resolve, reject) => {
    const secure = url.startsWith('https:')
    const send = secure ? httpsRequest : httpRequest
    const agent = secure ? agents?.https : agents?.http
    const headers = { ...init.headers }
    headers['content-length'] = String(Buffer.byteLength(init.body))
    // The signal by hand: `request({ signal })` also hangs an end-of-stream watcher on the
    // request, which costs more than the rest of this function.
    const { signal } = init
    const abort = () => req.destroy(signal.reason)
    const req = send({ ...requestOptionsOf(url), method: init.method, headers, agent }, (res) => {
      res.once('close', () => signal.removeEventListener('abort', abort))
      resolve(answer(res))
    })
    req.on('error', (error) => {
      signal.removeEventListener('abort', abort)
      reject(error)
    })
    if (signal.aborted) abort()
    else signal.addEventListener('abort', abort, { once: true })
    req.end(init.body)
  })
}

const forwardedHeaders = [
  'content-type',
  'anthropic-version',
  'anthropic-beta',
  'x-client-request-id',
  'x-fault-scenario',
]

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

/** The request body as a JSON object, or `undefined` when it is not one. */
function parseBody(body: string): Record<string, unknown> | undefined {
  try {
    const json: unknown = JSON.parse(body)
    return typeof json === 'object' && json !== null && !Array.isArray(json)
      ? (json as Record<string, unknown>)
      : undefined
  } catch {
    return undefined
  }
}

/** The `413` body in the client's own protocol; the message names the bound, never the body. */
function requestTooLargeBody(adapter: StreamAdapter, limit: number): string {
  const error = {
    type: 'request_too_large',
    code: 'request_too_large',
    message: `The request body is larger than this gateway accepts (${limit} bytes)`,
    status: 413,
  }
  return adapter.renderErrorBody?.(error) ?? JSON.stringify({ error })
}

/** Whether a `Connection` header value (lowercased) names `header`. */
function namedIn(connection: string | undefined, header: string): boolean {
  if (connection === undefined || !connection.includes(header)) return false
  return connection.split(',').some((token) => token.trim() === header)
}

/** One decoder for every request body (`decode` without `stream` keeps no state). */
const utf8 = new TextDecoder()

/**
 * The request body, or `undefined` when it is past the bound: a declared `content-length` is
 * refused before reading, a streamed body is read no further than the bound. Read as the Node
 * stream it is (a web stream over it costs more than the rest of a small request).
 */
function boundedBody(req: IncomingMessage, limit: number): Promise<string | undefined> {
  if (Number(req.headers['content-length']) > limit) return Promise.resolve(undefined)
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const stop = () => {
      req.off('data', onData)
      req.off('end', onEnd)
      req.off('error', onError)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size <= limit) return void chunks.push(chunk)
      stop()
      req.pause()
      resolve(undefined)
    }
    const onEnd = () => {
      stop()
      resolve(utf8.decode(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)))
    }
    const onError = (error: Error) => {
      stop()
      reject(error)
    }
    req.on('data', onData)
    req.once('end', onEnd)
    req.once('error', onError)
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
  const agents = client === 'node:http' ? upstreamAgents() : undefined
  const send: UpstreamClient =
    client === 'fetch'
      ? fetch
      : client === 'node:http'
        ? (url, init) => nodeFetch(url, init, nodeResponse, agents)
        : client
  // relay() hands policy.forwardHeaders to its commit gate.
  const policy = { ...config.policy, forwardHeaders }
  const endpoint = (url: string, adapter: StreamAdapter, pool: KeyPool) => ({
    url,
    adapter,
    pool,
    // Whether the library's per-attempt request id may go to `url` (read once, not per attempt).
    firstParty: isFirstPartyApi(url),
    // Each protocol names its own credential header (`authorization: Bearer`, `x-api-key`).
    credential: (secret: string): readonly [string, string] => {
      const header = adapter.credentialHeader?.(secret)
      if (header === undefined) throw new TypeError(`${adapter.name} has no credentialHeader`)
      return header
    },
  })
  const poolOptions = config.onKeyState === undefined ? {} : { onKeyState: config.onKeyState }
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
    const body = await boundedBody(req, maxRequestBodyBytes)
    if (body === undefined) {
      // `connection: close`: the unread rest of the body must not be taken for a next request.
      const head = { 'content-type': 'application/json', connection: 'close' }
      res.writeHead(413, head).end(requestTooLargeBody(target.adapter, maxRequestBodyBytes))
      return
    }
    // Plain records, not `Headers` (whose checks cost more than the rest of the attempt's
    // set-up): the names are the client's, lowercased by node:http.
    const headers: Record<string, string> = {}
    // A header the client named in `Connection` is hop-by-hop: it ends here.
    const hopByHop = req.headers.connection?.toLowerCase()
    for (const name of forwardedHeaders) {
      const value = req.headers[name]
      if (typeof value === 'string' && !namedIn(hopByHop, name)) headers[name] = value
    }
    const json = parseBody(body)
    // Bounded before the first output only: a relayed stream gives its place up at commit (a
    // whole answer's output is the answer).
    const release = await pending.acquire()
    // A client that left while its request waited costs no attempt.
    if (res.destroyed) return release()
    const hooks = config.hooks
    const outcome = await relay({
      // nodeSink watches the client: a client that leaves ends the relay as client-gone.
      sink: nodeSink(res),
      pool: target.pool,
      adapter: target.adapter,
      policy,
      hooks: {
        ...hooks,
        onCommit: (context) => {
          release()
          hooks?.onCommit?.(context)
        },
      },
      // The body as JSON lets the relay adjust it or fall back to a non-streaming request, and
      // says whether the client asked for a stream: a `stream: false` request is relayed by the
      // same engine and answered with the upstream's JSON as it came.
      ...(json === undefined ? { stream: false } : { request: { url: target.url, body: json } }),
      attempt: ({ key, signal, request, requestId }) => {
        const withKey = { ...headers }
        const [name, value] = target.credential(key.secret)
        withKey[name.toLowerCase()] = value
        // The client's own request id, when it sent one, names every attempt; the library's
        // per-attempt id goes only to a provider's own API (a third-party host may refuse it).
        const url = request?.url ?? target.url
        if (
          requestId !== undefined &&
          withKey['x-client-request-id'] === undefined &&
          (url === target.url ? target.firstParty : isFirstPartyApi(url))
        )
          withKey['x-client-request-id'] = requestId
        // The client's bytes as they came, unless the relay changed the request (a fitted
        // output budget, the non-streaming fallback): no re-serialising of a large prompt.
        const sent =
          request === undefined || request.body === json ? body : JSON.stringify(request.body)
        return send(url, {
          method: 'POST',
          headers: withKey,
          body: sent,
          signal,
          // A pool key never follows a redirect to another origin (node:http never does).
          redirect: 'manual',
        })
      },
    }).finally(release)
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
    // CONTINUE_AFTER_CUT=1 continues answers cut after output (Anthropic; Chat with a dialect).
    ...(process.env.CONTINUE_AFTER_CUT === '1' ? { policy: { continueAfterCut: true } } : {}),
    ...(process.env.UPSTREAM_OPENAI_CONTINUATION
      ? { openaiContinuation: process.env.UPSTREAM_OPENAI_CONTINUATION as OpenAIChatContinuation }
      : {}),
    ...(await prometheusTelemetry(process.env.PROMETHEUS_PORT)),
  })
  console.log(`stream-boundary gateway listening on ${gateway.url}`)
}
