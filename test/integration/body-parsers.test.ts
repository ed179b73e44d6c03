/**
 * A body parser in front of `readNodeRequest`, as users mount one: Express with
 * `app.use(express.json())` (the first line of most Express apps) and Fastify with its default
 * JSON content-type parser, each on 127.0.0.1 with the official `openai` SDK as the client. The
 * parsed body goes through the same checks (shape, depth, size) and is relayed; where the
 * reader cannot see what the parser made (Fastify keeps it on its own `request`), the client
 * gets a 500 that names the cause, at once: never an empty reply, never a wait.
 */

import type { AddressInfo } from 'node:net'
import express from 'express'
import Fastify from 'fastify'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import type { ClientRequestRefusal } from '../../src/advanced.js'
import { createMemoryKeyPool, openaiChat, relay } from '../../src/index.js'
import { fastifySink, nodeHttpAttempt, nodeSink, readNodeRequest } from '../../src/node.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

const answer = 'The quick brown fox jumps over the lazy dog.'
const messages = [{ role: 'user' as const, content: 'Say the pangram.' }]
const keys = [{ id: 'key-a', secret: 'sk-parsers-a' }]
const deepBody = `{"model":"m","stream":true,"messages":[],"x":${'['.repeat(6_000)}${']'.repeat(6_000)}}`

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

async function upstream() {
  const faulty = createFaultyUpstream({ scenarios: { s: ['empty', 'ok'] } })
  const url = await faulty.listen()
  cleanups.push(() => faulty.close())
  return { faulty, url }
}

function clientOf(url: string) {
  return new OpenAI({
    apiKey: 'sk-client',
    baseURL: `${url}/v1`,
    maxRetries: 0,
    defaultHeaders: { 'x-fault-scenario': 's' },
  })
}

async function streamText(openai: OpenAI): Promise<string> {
  const stream = await openai.chat.completions.create({ model: 'm', messages, stream: true })
  let text = ''
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
  return text
}

/** A POST with a raw JSON body; the status, the body and how long the answer took. */
async function post(url: string, body: string) {
  const started = performance.now()
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
    body,
    signal: AbortSignal.timeout(5_000),
  })
  return { status: response.status, text: await response.text(), ms: performance.now() - started }
}

describe('Express with app.use(express.json()) in front of readNodeRequest', () => {
  async function start() {
    const { faulty, url: upstreamUrl } = await upstream()
    const refusals: ClientRequestRefusal[] = []
    const pool = createMemoryKeyPool(keys)
    const app = express()
    app.use(express.json())
    app.post('/v1/chat/completions', async (req, res) => {
      const body = await readNodeRequest(req, res, {
        adapter: openaiChat,
        onRefused: (refusal) => refusals.push(refusal),
      })
      if (body === undefined) return
      await relay({
        sink: nodeSink(res),
        pool,
        adapter: openaiChat,
        request: { url: `${upstreamUrl}/v1/chat/completions`, body },
        attempt: nodeHttpAttempt({
          clientHeaders: req.headers,
          forwardHeaders: ['x-fault-scenario'],
        }),
      })
    })
    const server = app.listen(0, '127.0.0.1')
    await new Promise((resolve) => server.once('listening', resolve))
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve())
          server.closeAllConnections()
        }),
    )
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    return { url, faulty, refusals }
  }

  it('the body express.json() parsed is relayed: the whole stream after a retry', async () => {
    const { url, faulty } = await start()
    expect(await streamText(clientOf(url))).toBe(answer)
    expect(faulty.requests.map((request) => request.fault)).toEqual(['empty', 'ok'])
  })

  it("the issue's body nested 6,000 deep: a 400 naming the bound, nothing sent upstream", async () => {
    const { url, faulty, refusals } = await start()
    const answered = await post(url, deepBody)
    expect(answered.status).toBe(400)
    expect(answered.text).toMatch(/nested deeper than this gateway accepts \(128 levels\)/)
    expect(faulty.requests).toHaveLength(0)
    expect(refusals).toMatchObject([{ kind: 'refused', status: 400, reason: 'too-deep' }])
  })

  it('a parsed body that fails the protocol checks: a 400 in the protocol', async () => {
    const { url, faulty } = await start()
    const answered = await post(url, JSON.stringify({ model: 7, messages }))
    expect(answered.status).toBe(400)
    expect(JSON.parse(answered.text)).toMatchObject({
      error: { message: expect.stringMatching(/`model` must be a non-empty string/) },
    })
    expect(faulty.requests).toHaveLength(0)
  })
})

describe('Fastify with its default JSON parser in front of readNodeRequest', () => {
  async function start(handOver: boolean) {
    const { faulty, url: upstreamUrl } = await upstream()
    const refusals: ClientRequestRefusal[] = []
    const pool = createMemoryKeyPool(keys)
    const app = Fastify()
    app.post('/v1/chat/completions', async (request, reply) => {
      const sink = fastifySink(reply)
      const body = await readNodeRequest(request.raw, reply.raw, {
        adapter: openaiChat,
        ...(handOver ? { parsedBody: request.body } : {}),
        onRefused: (refusal) => refusals.push(refusal),
      })
      if (body === undefined) return
      await relay({
        sink,
        pool,
        adapter: openaiChat,
        request: { url: `${upstreamUrl}/v1/chat/completions`, body },
        attempt: nodeHttpAttempt({
          clientHeaders: request.headers,
          forwardHeaders: ['x-fault-scenario'],
        }),
      })
    })
    const url = await app.listen({ port: 0, host: '127.0.0.1' })
    cleanups.push(() => app.close())
    return { url, faulty, refusals }
  }

  it('parsedBody: request.body is relayed: the whole stream after a retry', async () => {
    const { url, faulty } = await start(true)
    expect(await streamText(clientOf(url))).toBe(answer)
    expect(faulty.requests.map((request) => request.fault)).toEqual(['empty', 'ok'])
  })

  it("parsedBody: the issue's body nested 6,000 deep is a 400, nothing sent upstream", async () => {
    const { url, faulty, refusals } = await start(true)
    const answered = await post(url, deepBody)
    expect(answered.status).toBe(400)
    expect(answered.text).toMatch(/nested deeper/)
    expect(faulty.requests).toHaveLength(0)
    expect(refusals).toMatchObject([{ kind: 'refused', status: 400, reason: 'too-deep' }])
  })

  it('nothing handed over: a 500 naming the cause at once, not an empty reply or a wait', async () => {
    const { url, faulty, refusals } = await start(false)
    const answered = await post(url, JSON.stringify({ model: 'm', messages, stream: true }))
    expect(answered.status).toBe(500)
    expect(answered.ms).toBeLessThan(1_000)
    expect(JSON.parse(answered.text)).toMatchObject({
      error: { message: expect.stringMatching(/already read .*parsedBody/) },
    })
    expect(faulty.requests).toHaveLength(0)
    expect(refusals).toMatchObject([{ kind: 'refused', status: 500, reason: 'already-read' }])
  })
})
