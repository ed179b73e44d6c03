/**
 * The gateway of `node-http-gateway.ts` on Hono with `webSink()`: Web standards only, so
 * `createApp(config)` runs unchanged on Workers, Bun, Deno and Node. The same safe defaults:
 * `413` past `maxRequestBodyBytes` before any upstream attempt, and only the upstream headers
 * the `forwardHeaders` allowlist names reach clients.
 *
 * Run it on Node:
 *   UPSTREAM_OPENAI_URL=https://api.openai.com/v1 UPSTREAM_ANTHROPIC_URL=https://api.anthropic.com \
 *   GATEWAY_KEYS=primary:sk-...,backup:sk-... PORT=8787 node --import tsx examples/hono-gateway.ts
 */

import { Hono } from 'hono'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createRelay,
  fetchAttempt,
  type KeyPool,
  openaiChat,
  openaiResponses,
  readClientRequest,
  type StreamAdapter,
  webSink,
} from 'stream-boundary'
import {
  forwardHeadersDefaults,
  readyAttemptDefaults,
  requestBodyDefaults,
} from 'stream-boundary/advanced'
import type { GatewayConfig } from './node-http-gateway.js'

/** The client headers sent upstream: the library's allowlist, and the faulty upstream's scenario header for tests. */
const forwardedHeaders = [...readyAttemptDefaults.forwardHeaders, 'x-fault-scenario']

export function createApp(config: Omit<GatewayConfig, 'port'>): Hono {
  const app = new Hono()
  const forwardHeaders = config.forwardHeaders ?? forwardHeadersDefaults
  const maxRequestBodyBytes = config.maxRequestBodyBytes ?? requestBodyDefaults.maxRequestBodyBytes
  // The relay hands policy.forwardHeaders to its commit gate.
  const policy = { ...config.policy, forwardHeaders }
  const route = (path: string, url: string, adapter: StreamAdapter, pool: KeyPool) => {
    // Built once per route: its options are checked here, not on every request.
    const relay = createRelay({
      pool,
      adapter,
      policy,
      ...(config.hooks === undefined ? {} : { hooks: config.hooks }),
    })
    app.post(path, async (c) => {
      // Read within the bound, UTF-8 decoded once, parsed and checked: 413 or 400 in the
      // client's protocol before any upstream attempt.
      const read = await readClientRequest(c.req.raw, { adapter, maxRequestBodyBytes })
      if (!read.ok) return read.response
      // Streaming or not, one relay: a `stream: false` request gets the upstream's JSON answer
      // as it came, with the same retries, bounds and give-up answers as a stream.
      const { sink, response } = webSink()
      void relay({
        sink,
        signal: c.req.raw.signal,
        request: { url, body: read.body },
        // Each attempt's own request, the route's credential header for the leased key, the
        // allowlisted client headers; a pool key never follows a redirect.
        attempt: fetchAttempt({
          clientHeaders: c.req.raw.headers,
          forwardHeaders: forwardedHeaders,
        }),
      })
      return response
    })
  }
  const openaiPool = createMemoryKeyPool(config.keys)
  route('/v1/chat/completions', `${config.openaiBaseUrl}/chat/completions`, openaiChat, openaiPool)
  route('/v1/responses', `${config.openaiBaseUrl}/responses`, openaiResponses, openaiPool)
  const anthropicPool = createMemoryKeyPool(config.keys)
  route('/v1/messages', `${config.anthropicBaseUrl}/v1/messages`, anthropicMessages, anthropicPool)
  app.notFound((c) =>
    c.json({ error: { type: 'not_found', message: `no route for ${c.req.path}` } }, 404),
  )
  return app
}

// Node-only imports stay dynamic, so the app itself carries no `node:` code.
const entry = globalThis.process?.argv?.[1]
if (
  entry !== undefined &&
  import.meta.url === (await import('node:url')).pathToFileURL(entry).href
) {
  const { serve } = await import('@hono/node-server')
  const { keysFromEnv } = await import('./node-http-gateway.js')
  const app = createApp({
    openaiBaseUrl: process.env.UPSTREAM_OPENAI_URL ?? 'https://api.openai.com/v1',
    anthropicBaseUrl: process.env.UPSTREAM_ANTHROPIC_URL ?? 'https://api.anthropic.com',
    keys: keysFromEnv(process.env.GATEWAY_KEYS),
  })
  serve(
    { fetch: app.fetch, port: Number(process.env.PORT ?? 8787), hostname: '127.0.0.1' },
    (info) =>
      console.log(`stream-boundary hono gateway listening on http://127.0.0.1:${info.port}`),
  )
}
