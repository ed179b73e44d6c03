/**
 * The gateway of `node-http-gateway.ts` as a Fastify app: `fastifySink(reply)` hijacks the
 * reply (Fastify sends nothing of its own for a relayed request, its error handler included)
 * and carries the headers plugins set on it (CORS here) into the relayed head; the relay
 * routes read their own bodies with `readNodeRequest` (bounded, checked, `400`/`413` in the
 * client's protocol), so Fastify's JSON parser is turned off for them.
 *
 * Run it:
 *   UPSTREAM_OPENAI_URL=https://api.openai.com/v1 UPSTREAM_ANTHROPIC_URL=https://api.anthropic.com \
 *   GATEWAY_KEYS=primary:sk-...,backup:sk-... PORT=8787 node --import tsx examples/fastify-gateway.ts
 */

import { pathToFileURL } from 'node:url'
import cors from '@fastify/cors'
import Fastify, { type FastifyInstance } from 'fastify'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createRelay,
  type KeyPool,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from 'stream-boundary'
import { forwardHeadersDefaults, readyAttemptDefaults } from 'stream-boundary/advanced'
import { fastifySink, nodeHttpAttempt, readNodeRequest } from 'stream-boundary/node'
import { type GatewayConfig, keysFromEnv } from './node-http-gateway.js'

/** The client headers sent upstream: the library's allowlist, and the faulty upstream's scenario header for tests. */
const forwardedHeaders = [...readyAttemptDefaults.forwardHeaders, 'x-fault-scenario']

export async function createFastifyApp(
  config: Omit<GatewayConfig, 'port'>,
): Promise<FastifyInstance> {
  const app = Fastify()
  // A plugin that sets headers on `reply`: fastifySink carries them into the relayed head.
  await app.register(cors, { origin: true, exposedHeaders: ['x-request-id'] })
  const policy = {
    ...config.policy,
    forwardHeaders: config.forwardHeaders ?? forwardHeadersDefaults,
  }
  const route = (
    gateway: FastifyInstance,
    path: string,
    url: string,
    adapter: StreamAdapter,
    pool: KeyPool,
  ) => {
    // Built once per route: its options are checked here, not on every request.
    const relay = createRelay({
      pool,
      adapter,
      policy,
      ...(config.hooks === undefined ? {} : { hooks: config.hooks }),
    })
    gateway.post(path, async (request, reply) => {
      // Hijacks the reply first: from here on only the relay (or readNodeRequest's 400/413) writes.
      const sink = fastifySink(reply)
      const body = await readNodeRequest(request.raw, reply.raw, {
        adapter,
        ...(config.maxRequestBodyBytes === undefined
          ? {}
          : { maxRequestBodyBytes: config.maxRequestBodyBytes }),
      })
      if (body === undefined) return // answered 400/413 already
      await relay({
        sink,
        request: { url, body },
        // Each attempt's own request, the route's credential header for the leased key, the
        // allowlisted client headers; a pool key never follows a redirect.
        attempt: nodeHttpAttempt({
          clientHeaders: request.headers,
          forwardHeaders: forwardedHeaders,
        }),
      })
    })
  }
  await app.register(async (gateway) => {
    // The relay routes read their bodies themselves: Fastify's parsers leave them unread.
    gateway.removeAllContentTypeParsers()
    gateway.addContentTypeParser('*', (_request, _payload, done) => done(null))
    const openaiPool = createMemoryKeyPool(config.keys)
    route(
      gateway,
      '/v1/chat/completions',
      `${config.openaiBaseUrl}/chat/completions`,
      openaiChat,
      openaiPool,
    )
    route(
      gateway,
      '/v1/responses',
      `${config.openaiBaseUrl}/responses`,
      openaiResponses,
      openaiPool,
    )
    const anthropicPool = createMemoryKeyPool(config.keys)
    route(
      gateway,
      '/v1/messages',
      `${config.anthropicBaseUrl}/v1/messages`,
      anthropicMessages,
      anthropicPool,
    )
  })
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ error: { type: 'not_found', message: `no route for ${request.url}` } }),
  )
  return app
}

const entry = process.argv[1]
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  const app = await createFastifyApp({
    openaiBaseUrl: process.env.UPSTREAM_OPENAI_URL ?? 'https://api.openai.com/v1',
    anthropicBaseUrl: process.env.UPSTREAM_ANTHROPIC_URL ?? 'https://api.anthropic.com',
    keys: keysFromEnv(process.env.GATEWAY_KEYS),
  })
  const address = await app.listen({ port: Number(process.env.PORT ?? 8787), host: '127.0.0.1' })
  console.log(`fastify gateway on ${address}`)
}
