/**
 * Next.js App Router route handlers for the gateway of `node-http-gateway.ts`: a route handler
 * is a function from a web `Request` to a `Response`, so the relay runs on `readClientRequest`,
 * `fetchAttempt` and `webSink` alone, as on Hono or Workers. In an app, one file per route:
 *
 *   // app/v1/chat/completions/route.ts
 *   import { chatCompletions } from '@/lib/gateway' // this file's routes, made once
 *   export const POST = chatCompletions
 *   export const dynamic = 'force-dynamic' // never cached, streamed as it comes
 *
 * The Node.js runtime and the Edge runtime both work (Web standards only).
 */

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
import { forwardHeadersDefaults, readyAttemptDefaults } from 'stream-boundary/advanced'
import type { GatewayConfig } from './node-http-gateway.js'

/** The client headers sent upstream: the library's allowlist, and the faulty upstream's scenario header for tests. */
const forwardedHeaders = [...readyAttemptDefaults.forwardHeaders, 'x-fault-scenario']

/** A route handler: what `export const POST = …` in an `app/**\/route.ts` file takes. */
export type RouteHandler = (request: Request) => Promise<Response>

/** The gateway's three route handlers, by the path each `route.ts` lives at. */
export function createRouteHandlers(config: Omit<GatewayConfig, 'port'>): {
  chatCompletions: RouteHandler
  responses: RouteHandler
  messages: RouteHandler
} {
  const policy = {
    ...config.policy,
    forwardHeaders: config.forwardHeaders ?? forwardHeadersDefaults,
  }
  const handler = (url: string, adapter: StreamAdapter, pool: KeyPool): RouteHandler => {
    // Built once per route: its options are checked here, not on every request.
    const relay = createRelay({
      pool,
      adapter,
      policy,
      ...(config.hooks === undefined ? {} : { hooks: config.hooks }),
    })
    return async (request) => {
      const read = await readClientRequest(request, {
        adapter,
        ...(config.maxRequestBodyBytes === undefined
          ? {}
          : { maxRequestBodyBytes: config.maxRequestBodyBytes }),
      })
      if (!read.ok) return read.response // 400 or 413 in the client's protocol
      const { sink, response } = webSink()
      void relay({
        sink,
        // Next aborts the request's signal when the client goes away.
        signal: request.signal,
        request: { url, body: read.body },
        attempt: fetchAttempt({ clientHeaders: request.headers, forwardHeaders: forwardedHeaders }),
      })
      return response
    }
  }
  const openaiPool = createMemoryKeyPool(config.keys)
  const anthropicPool = createMemoryKeyPool(config.keys)
  return {
    chatCompletions: handler(`${config.openaiBaseUrl}/chat/completions`, openaiChat, openaiPool),
    responses: handler(`${config.openaiBaseUrl}/responses`, openaiResponses, openaiPool),
    messages: handler(`${config.anthropicBaseUrl}/v1/messages`, anthropicMessages, anthropicPool),
  }
}
