/**
 * The gateway of `node-http-gateway.ts` as an Express app: Express's `res` is Node's
 * `http.ServerResponse`, so `nodeSink(res)` is all it takes, and headers middleware set with
 * `res.setHeader` (CORS here) reach the relayed head as they are. The relay routes read their
 * own bodies with `readNodeRequest` (bounded, checked, `400`/`413` in the client's protocol):
 * mount no body parser in front of them.
 *
 * Run it:
 *   UPSTREAM_OPENAI_URL=https://api.openai.com/v1 UPSTREAM_ANTHROPIC_URL=https://api.anthropic.com \
 *   GATEWAY_KEYS=primary:sk-...,backup:sk-... PORT=8787 node --import tsx examples/express-gateway.ts
 */

import { pathToFileURL } from 'node:url'
import express, { type Express } from 'express'
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
import { nodeHttpAttempt, nodeSink, readNodeRequest } from 'stream-boundary/node'
import { type GatewayConfig, keysFromEnv } from './node-http-gateway.js'

/** The client headers sent upstream: the library's allowlist, and the faulty upstream's scenario header for tests. */
const forwardedHeaders = [...readyAttemptDefaults.forwardHeaders, 'x-fault-scenario']

export function createExpressApp(config: Omit<GatewayConfig, 'port'>): Express {
  const app = express()
  // Middleware that sets headers on `res`: Node merges them into the relay's head.
  app.use((_req, res, next) => {
    res.setHeader('access-control-allow-origin', '*')
    next()
  })
  const policy = {
    ...config.policy,
    forwardHeaders: config.forwardHeaders ?? forwardHeadersDefaults,
  }
  const route = (path: string, url: string, adapter: StreamAdapter, pool: KeyPool) => {
    // Built once per route: its options are checked here, not on every request.
    const relay = createRelay({
      pool,
      adapter,
      policy,
      ...(config.hooks === undefined ? {} : { hooks: config.hooks }),
    })
    app.post(path, async (req, res) => {
      const body = await readNodeRequest(req, res, {
        adapter,
        ...(config.maxRequestBodyBytes === undefined
          ? {}
          : { maxRequestBodyBytes: config.maxRequestBodyBytes }),
      })
      if (body === undefined) return // answered 400/413 already
      // The relay answers every upstream failure itself and never rejects on one; Express 5
      // passes a rejection (a bad option) to its error handler, which finds the response ended.
      await relay({
        sink: nodeSink(res),
        request: { url, body },
        attempt: nodeHttpAttempt({ clientHeaders: req.headers, forwardHeaders: forwardedHeaders }),
      })
    })
  }
  const openaiPool = createMemoryKeyPool(config.keys)
  route('/v1/chat/completions', `${config.openaiBaseUrl}/chat/completions`, openaiChat, openaiPool)
  route('/v1/responses', `${config.openaiBaseUrl}/responses`, openaiResponses, openaiPool)
  const anthropicPool = createMemoryKeyPool(config.keys)
  route('/v1/messages', `${config.anthropicBaseUrl}/v1/messages`, anthropicMessages, anthropicPool)
  app.use((req, res) => {
    res.status(404).json({ error: { type: 'not_found', message: `no route for ${req.path}` } })
  })
  return app
}

const entry = process.argv[1]
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  const app = createExpressApp({
    openaiBaseUrl: process.env.UPSTREAM_OPENAI_URL ?? 'https://api.openai.com/v1',
    anthropicBaseUrl: process.env.UPSTREAM_ANTHROPIC_URL ?? 'https://api.anthropic.com',
    keys: keysFromEnv(process.env.GATEWAY_KEYS),
  })
  const port = Number(process.env.PORT ?? 8787)
  app.listen(port, '127.0.0.1', () => console.log(`express gateway on http://127.0.0.1:${port}`))
}
