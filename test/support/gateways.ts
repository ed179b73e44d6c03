import type { Server } from 'node:http'
import { serve } from '@hono/node-server'
import { createExpressApp } from '../../examples/express-gateway.js'
import { createFastifyApp } from '../../examples/fastify-gateway.js'
import { createApp } from '../../examples/hono-gateway.js'
import { createRouteHandlers } from '../../examples/next-route.js'
import type { GatewayConfig } from '../../examples/node-http-gateway.js'
import worker from '../../examples/worker.js'
import type { RelayOutcome } from '../../src/index.js'
import { serveFetch } from '../../src/node.js'

/** A gateway under test, started on an ephemeral port on 127.0.0.1. */
export interface RunningGateway {
  readonly url: string
  readonly outcomes: RelayOutcome[]
  close(): Promise<void>
}

/** The Hono example gateway served with @hono/node-server, recording every relay outcome. */
export async function startHonoGateway(
  config: Omit<GatewayConfig, 'port'>,
): Promise<RunningGateway> {
  const outcomes: RelayOutcome[] = []
  const app = createApp({ ...config, hooks: { onOutcome: (outcome) => outcomes.push(outcome) } })
  const server = await new Promise<Server>((resolve) => {
    const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () =>
      resolve(started as Server),
    )
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return {
    url: `http://127.0.0.1:${address.port}`,
    outcomes,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

function recording(config: Omit<GatewayConfig, 'port'>) {
  const outcomes: RelayOutcome[] = []
  return {
    outcomes,
    config: { ...config, hooks: { onOutcome: (outcome: RelayOutcome) => outcomes.push(outcome) } },
  }
}

function closing(server: Server): () => Promise<void> {
  return () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.closeAllConnections()
    })
}

/** The Fastify example gateway listening on 127.0.0.1, recording every relay outcome. */
export async function startFastifyGateway(
  config: Omit<GatewayConfig, 'port'>,
): Promise<RunningGateway> {
  const { outcomes, config: recorded } = recording(config)
  const app = await createFastifyApp(recorded)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  return { url, outcomes, close: () => app.close() }
}

/** The Express example gateway listening on 127.0.0.1, recording every relay outcome. */
export async function startExpressGateway(
  config: Omit<GatewayConfig, 'port'>,
): Promise<RunningGateway> {
  const { outcomes, config: recorded } = recording(config)
  const app = createExpressApp(recorded)
  const server = await new Promise<Server>((resolve) => {
    const started = app.listen(0, '127.0.0.1', () => resolve(started))
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return { url: `http://127.0.0.1:${address.port}`, outcomes, close: closing(server) }
}

/**
 * The Next.js route handlers of examples/next-route.ts, each called with the real `Request`
 * `serveFetch` makes, routed by path as the App Router's file layout would (Next itself is
 * not run: a route handler is a plain `Request → Response` function).
 */
export async function startNextRoutes(
  config: Omit<GatewayConfig, 'port'>,
): Promise<RunningGateway> {
  const { outcomes, config: recorded } = recording(config)
  const routes = createRouteHandlers(recorded)
  const byPath: Record<string, (request: Request) => Promise<Response>> = {
    '/v1/chat/completions': routes.chatCompletions,
    '/v1/responses': routes.responses,
    '/v1/messages': routes.messages,
  }
  const served = await serveFetch((request) => {
    const path = new URL(request.url).pathname
    const handler = request.method === 'POST' ? byPath[path] : undefined
    if (handler !== undefined) return handler(request)
    return Response.json(
      { error: { type: 'not_found', message: `no route for ${path}` } },
      { status: 404 },
    )
  })
  return { url: served.url, outcomes, close: served.close }
}

/**
 * The Worker of examples/worker.ts called on Node with the real `Request` `serveFetch` makes
 * (workerd itself runs it in scripts/workerd-smoke.mjs). The example has no hooks: outcomes stay
 * empty. Its pools live per set of bindings, so `keys` get an id of their own per start.
 */
export async function startWorker(config: Omit<GatewayConfig, 'port'>): Promise<RunningGateway> {
  const env = {
    UPSTREAM_OPENAI_URL: config.openaiBaseUrl,
    UPSTREAM_ANTHROPIC_URL: config.anthropicBaseUrl,
    GATEWAY_KEYS: config.keys.map((key) => `${key.id}:${key.secret}`).join(','),
  }
  const pending = new Set<Promise<unknown>>()
  const ctx = {
    waitUntil(promise: Promise<unknown>) {
      pending.add(promise)
      void promise.finally(() => pending.delete(promise))
    },
  }
  const served = await serveFetch((request) => worker.fetch(request, env, ctx))
  return {
    url: served.url,
    outcomes: [],
    close: async () => {
      await served.close()
      await Promise.allSettled(pending)
    },
  }
}
