import { createServer } from 'node:http'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import {
  createResilientFetch,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
} from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { chunk, done } from '../support/chat-upstream.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * `data: {"error":"upstream failed"}` and `{"error":true}`: the `openai` SDK raises an
 * `APIError` on them (any truthy `error`), so before output they are an error frame the relay
 * retries at once, not bookkeeping it waits past until the first-output timeout. Twins:
 * `relay()` behind node:http and `createResilientFetch`, streaming and not.
 */

const { listen } = useLoopback()

const policy: RelayPolicy = {
  maxAttempts: 2,
  backoff: { baseMs: 5, maxMs: 20 },
  // Long enough that waiting for it would show.
  peek: { firstByteTimeoutMs: 5_000, firstOutputTimeoutMs: 5_000 },
}

/** First request: a role chunk, the error frame, then the connection held; then the answer. */
async function upstreamWith(errorJson: string) {
  let requests = 0
  const server = createServer((req, res) => {
    withBody(req, (body) => {
      const first = requests++ === 0
      const streaming = (JSON.parse(body) as { stream?: boolean }).stream === true
      if (!streaming) {
        res.writeHead(200, { 'content-type': 'application/json' })
        const message = { role: 'assistant', content: 'Hello, world' }
        res.end(
          first
            ? errorJson
            : JSON.stringify({
                id: 'c',
                object: 'chat.completion',
                choices: [{ index: 0, message, finish_reason: 'stop' }],
              }),
        )
        return
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      if (first) return void res.write(`${chunk({ role: 'assistant' })}data: ${errorJson}\n\n`)
      res.end(`${chunk({ content: 'Hello, world' })}${chunk({}, 'stop')}${done}`)
    })
  })
  return { url: await listen(server), requests: () => requests }
}

async function relayGateway(upstreamUrl: string, outcomes: RelayOutcome[]) {
  const gateway = createServer((req, res) => {
    withBody(req, (body) => {
      void relay({
        sink: nodeSink(res),
        adapter: openaiChat,
        policy,
        request: { url: `${upstreamUrl}/v1/chat/completions`, body: JSON.parse(body) },
        attempt: ({ signal, request }) =>
          fetch(request?.url ?? '', {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(request?.body),
            signal,
          }),
      }).then((outcome) => outcomes.push(outcome))
    })
  })
  return listen(gateway)
}

describe.each(['{"error":"upstream failed"}', '{"error":true}'])('data: %s', (errorJson) => {
  describe.each(['relay', 'fetch'] as const)('through %s', (twin) => {
    it.each([true, false])(
      'stream: %s: retried at once, the client reads the next attempt’s answer',
      async (stream) => {
        const upstream = await upstreamWith(errorJson)
        const outcomes: RelayOutcome[] = []
        const baseURL =
          twin === 'relay'
            ? `${await relayGateway(upstream.url, outcomes)}/v1`
            : `${upstream.url}/v1`
        const client = new OpenAI({
          apiKey: 'x',
          baseURL,
          maxRetries: 0,
          ...(twin === 'fetch'
            ? { fetch: createResilientFetch({ policy, onOutcome: (each) => outcomes.push(each) }) }
            : {}),
        })
        const started = performance.now()
        let text = ''
        const ask = { model: 'm', messages: [{ role: 'user' as const, content: 'hi' }] }
        if (stream) {
          const parts = await client.chat.completions.create({ ...ask, stream: true })
          for await (const part of parts) text += part.choices[0]?.delta?.content ?? ''
        } else {
          const answer = await client.chat.completions.create(ask)
          text = answer.choices[0]?.message.content ?? ''
        }
        expect(text).toBe('Hello, world')
        expect(performance.now() - started).toBeLessThan(2_000)
        expect(upstream.requests()).toBe(2)
        await expect.poll(() => outcomes.length).toBe(1)
        expect(outcomes[0]).toMatchObject({ kind: 'committed' })
      },
    )
  })
})
