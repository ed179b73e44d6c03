import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { createResilientFetch } from '../../src/index.js'

/**
 * The official SDKs retry 408/409/429/5xx themselves (maxRetries 2 by default). Through
 * `createResilientFetch` the library's retries are already spent when the SDK sees the final
 * failure, so it must not retry again: an always-503 upstream sees exactly the library's
 * attempts, not 3 × 3.
 */

let server: Server | undefined
afterEach(async () => {
  await new Promise<void>((resolve) =>
    server === undefined ? resolve() : server.close(() => resolve()),
  )
  server = undefined
})

async function alwaysUnavailable(retryAfter?: string) {
  let requests = 0
  server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      requests++
      res.writeHead(503, {
        'content-type': 'application/json',
        ...(retryAfter === undefined ? {} : { 'retry-after': retryAfter }),
      })
      res.end('{"type":"error","error":{"type":"api_error","message":"unavailable"}}')
    })
  })
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}`, count: () => requests }
}

const policy = { maxAttempts: 3, backoff: { baseMs: 5, maxMs: 20 } }

describe('no retry stacking with the official SDKs at their default maxRetries', () => {
  it('openai: an always-503 upstream sees exactly maxAttempts requests, and the SDK gets the 503', async () => {
    const upstream = await alwaysUnavailable()
    const client = new OpenAI({
      apiKey: 'sk-test',
      baseURL: `${upstream.url}/v1`,
      fetch: createResilientFetch({ policy }),
    })
    const error = await client.chat.completions
      .create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] })
      .then(async (stream) => {
        for await (const _ of stream) {
          // drain
        }
      })
      .catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.APIError)
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(503)
    expect(upstream.count()).toBe(policy.maxAttempts)
  })

  it('anthropic: an always-503 upstream sees exactly maxAttempts requests', async () => {
    const upstream = await alwaysUnavailable()
    const client = new Anthropic({
      apiKey: 'sk-ant-test',
      baseURL: upstream.url,
      fetch: createResilientFetch({ policy }),
    })
    const error = await client.messages
      .create({
        model: 'm',
        max_tokens: 16,
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      })
      .then(async (stream) => {
        for await (const _ of stream) {
          // drain
        }
      })
      .catch((e: unknown) => e)
    expect(error).toBeInstanceOf(Anthropic.APIError)
    expect(upstream.count()).toBe(policy.maxAttempts)
  })
})
