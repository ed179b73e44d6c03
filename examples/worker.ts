/**
 * The gateway as a Cloudflare Worker: `readClientRequest` reads the client's request (bounded,
 * checked, `400`/`413` in the client's protocol), `fetchAttempt` sends each attempt, `webSink`
 * gives the `Response` to return, and `ctx.waitUntil` keeps the relay running until the
 * stream ends. Web standards only: no Node compatibility flag is needed.
 *
 * wrangler.toml: `main = "examples/worker.ts"`, vars UPSTREAM_OPENAI_URL and
 * UPSTREAM_ANTHROPIC_URL, and the secret GATEWAY_KEYS (`id:sk-…,id:sk-…`). Checked on workerd
 * itself by scripts/workerd-smoke.mjs, behind the official SDKs.
 */

import {
  anthropicMessages,
  type CompiledRelay,
  createMemoryKeyPool,
  createRelay,
  fetchAttempt,
  openaiChat,
  openaiResponses,
  type PoolKey,
  readClientRequest,
  type StreamAdapter,
  webSink,
} from 'stream-boundary'
import { readyAttemptDefaults } from 'stream-boundary/advanced'

/** The Worker's bindings. */
export interface Env {
  readonly UPSTREAM_OPENAI_URL: string
  readonly UPSTREAM_ANTHROPIC_URL: string
  /** `id:secret` pairs, comma-separated. */
  readonly GATEWAY_KEYS: string
}

/** What the Worker uses of its execution context. */
export interface WorkerContext {
  waitUntil(promise: Promise<unknown>): void
}

/** The client headers sent upstream: the library's allowlist, and the faulty upstream's scenario header for tests. */
const forwardHeaders = [...readyAttemptDefaults.forwardHeaders, 'x-fault-scenario']

interface Route {
  readonly url: string
  readonly adapter: StreamAdapter
  /** The route's relay, built once: its requests bring their sink, body and attempt. */
  readonly relay: CompiledRelay<true>
}

// A pool (and the relay over it) lives as long as the isolate: its cooldowns and circuits
// carry over between requests (made again only if the bindings change).
let made: { env: Env; routes: Map<string, Route> } | undefined

function routesOf(env: Env): Map<string, Route> {
  if (
    made !== undefined &&
    made.env.UPSTREAM_OPENAI_URL === env.UPSTREAM_OPENAI_URL &&
    made.env.UPSTREAM_ANTHROPIC_URL === env.UPSTREAM_ANTHROPIC_URL &&
    made.env.GATEWAY_KEYS === env.GATEWAY_KEYS
  )
    return made.routes
  const keys: PoolKey[] = env.GATEWAY_KEYS.split(',').map((pair) => {
    const at = pair.indexOf(':')
    return { id: pair.slice(0, at).trim(), secret: pair.slice(at + 1).trim() }
  })
  const openaiPool = createMemoryKeyPool(keys)
  const routes = new Map([
    [
      '/v1/chat/completions',
      {
        url: `${env.UPSTREAM_OPENAI_URL}/chat/completions`,
        adapter: openaiChat,
        relay: createRelay({ pool: openaiPool, adapter: openaiChat }),
      },
    ],
    [
      '/v1/responses',
      {
        url: `${env.UPSTREAM_OPENAI_URL}/responses`,
        adapter: openaiResponses,
        relay: createRelay({ pool: openaiPool, adapter: openaiResponses }),
      },
    ],
    [
      '/v1/messages',
      {
        url: `${env.UPSTREAM_ANTHROPIC_URL}/v1/messages`,
        adapter: anthropicMessages,
        relay: createRelay({ pool: createMemoryKeyPool(keys), adapter: anthropicMessages }),
      },
    ],
  ])
  made = { env, routes }
  return routes
}

export default {
  async fetch(request: Request, env: Env, ctx: WorkerContext): Promise<Response> {
    const path = new URL(request.url).pathname
    const route = request.method === 'POST' ? routesOf(env).get(path) : undefined
    if (route === undefined) {
      return Response.json(
        { error: { type: 'not_found', message: `no route for ${path}` } },
        { status: 404 },
      )
    }
    const read = await readClientRequest(request, { adapter: route.adapter })
    if (!read.ok) return read.response
    const { sink, response } = webSink()
    ctx.waitUntil(
      route.relay({
        sink,
        signal: request.signal,
        request: { url: route.url, body: read.body },
        attempt: fetchAttempt({ clientHeaders: request.headers, forwardHeaders }),
      }),
    )
    return response
  },
}
