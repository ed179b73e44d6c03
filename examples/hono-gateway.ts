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
import { anthropicMessages, createMemoryKeyPool, isFirstPartyApi, isRequestBodyTooLargeError, type KeyPool, openaiChat, openaiResponses, readRequestBody, relay, type StreamAdapter, webSink } from 'stream-boundary'
import { forwardHeadersDefaults, requestBodyDefaults } from 'stream-boundary/advanced'
import type { GatewayConfig } from './node-http-gateway.js'

const forwardedHeaders = [
  'content-type',
  'anthropic-version',
  'anthropic-beta',
  'x-client-request-id',
  'x-fault-scenario',
]

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

/** The body as text, or `undefined` when it is past the bound (read no further than it). */
async function boundedBody(request: Request, limit: number): Promise<string | undefined> {
  try {
    const bytes = await readRequestBody(request.body, {
      maxRequestBodyBytes: limit,
      contentLength: request.headers.get('content-length'),
    })
    return new TextDecoder().decode(bytes)
  } catch (error) {
    if (isRequestBodyTooLargeError(error)) return undefined
    throw error
  }
}

/** The body as a JSON object, or `undefined` when it is not one. */
function parseBody(body: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(body)
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined
  } catch {
    return undefined
  }
}

export function createApp(config: Omit<GatewayConfig, 'port'>): Hono {
  const app = new Hono()
  const forwardHeaders = config.forwardHeaders ?? forwardHeadersDefaults
  const maxRequestBodyBytes = config.maxRequestBodyBytes ?? requestBodyDefaults.maxRequestBodyBytes
  // relay() hands policy.forwardHeaders to its commit gate.
  const policy = { ...config.policy, forwardHeaders }
  const route = (path: string, url: string, adapter: StreamAdapter, pool: KeyPool) => {
    // Each protocol names its own credential header (`authorization: Bearer`, `x-api-key`).
    const credential = (secret: string): readonly [string, string] => {
      const header = adapter.credentialHeader?.(secret)
      if (header === undefined) throw new TypeError(`${adapter.name} has no credentialHeader`)
      return header
    }
    app.post(path, async (c) => {
      const body = await boundedBody(c.req.raw, maxRequestBodyBytes)
      if (body === undefined) {
        // Not cancelled (that would reset the connection before the 413); `connection: close`
        // keeps the unread rest from being taken for a next request.
        return new Response(requestTooLargeBody(adapter, maxRequestBodyBytes), {
          status: 413,
          headers: { 'content-type': 'application/json', connection: 'close' },
        })
      }
      const headers = new Headers()
      // A header the client named in `Connection` is hop-by-hop: it ends here.
      const connection = c.req.header('connection')?.toLowerCase().split(',') ?? []
      const hopByHop = new Set(connection.map((token) => token.trim()))
      for (const name of forwardedHeaders) {
        const value = c.req.header(name)
        if (value !== undefined && !hopByHop.has(name)) headers.set(name, value)
      }
      const signal = c.req.raw.signal
      const json = parseBody(body)
      // Streaming or not, one relay: a `stream: false` request gets the upstream's JSON answer
      // as it came, with the same retries, bounds and give-up answers as a stream.
      const { sink, response } = webSink()
      void relay({
        sink,
        pool,
        adapter,
        policy,
        signal,
        ...(config.hooks === undefined ? {} : { hooks: config.hooks }),
        ...(json === undefined ? { stream: false } : { request: { url, body: json } }),
        attempt: ({ key, signal, request, requestId }) => {
          const withKey = new Headers(headers)
          withKey.set(...credential(key.secret))
          // The client's own request id, when it sent one, names every attempt; the library's
          // per-attempt id goes only to a provider's own API (a third-party host may refuse it).
          if (
            requestId !== undefined &&
            !withKey.has('x-client-request-id') &&
            isFirstPartyApi(request?.url ?? url)
          )
            withKey.set('x-client-request-id', requestId)
          const sent =
            request === undefined || request.body === json ? body : JSON.stringify(request.body)
          return fetch(request?.url ?? url, {
            method: 'POST',
            headers: withKey,
            body: sent,
            signal,
            // A pool key never follows a redirect to another origin.
            redirect: 'manual',
          })
        },
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
