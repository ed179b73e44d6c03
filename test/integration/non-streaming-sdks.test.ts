import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { startGateway } from '../../examples/node-http-gateway.js'
import {
  createMemoryKeyPool,
  createResilientFetch,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
} from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * Non-streaming requests with the official SDKs, through `createResilientFetch` and through
 * the example gateway: the six ways the old second engine broke its promises, each asserted
 * on what the SDK got and what the upstream saw.
 */

const { listen, cleanup } = useLoopback()

const keys = [
  { id: 'a', secret: 'sk-pool-a-0123456789abcdef' },
  { id: 'b', secret: 'sk-pool-b-0123456789abcdef' },
]
const answer = 'The quick brown fox'
const bombBytes = 48 * 1024 * 1024

type Fault =
  | 'ok'
  | 'always-503'
  | 'rate-limited'
  | 'hang'
  | 'error-bomb'
  | 'key-quoted-401'
  | 'declared-too-large'

/** The credential a request carried, as a key id (or what it was, when it was no pool key). */
function keyOf(headers: Record<string, string | string[] | undefined>): string {
  const value = String(headers['x-api-key'] ?? headers.authorization ?? '').replace(/^Bearer /, '')
  return keys.find((key) => key.secret === value)?.id ?? `not a pool key: ${value}`
}

/** An OpenAI Chat and Anthropic Messages upstream; `x-fault-scenario` names the fault. */
async function upstream() {
  const seen: { fault: Fault; key: string }[] = []
  let bombWritten = 0
  const declared = { written: 0, closed: 0 }
  const server = createServer((req, res) => {
    withBody(req, () => {
      const fault = (req.headers['x-fault-scenario'] ?? 'ok') as Fault
      const anthropic = req.url?.endsWith('/messages') === true
      seen.push({ fault, key: keyOf(req.headers) })
      const json = { 'content-type': 'application/json', 'x-request-id': `req_${seen.length}` }
      const error = (type: string, message: string) =>
        JSON.stringify(
          anthropic ? { type: 'error', error: { type, message } } : { error: { type, message } },
        )
      switch (fault) {
        case 'ok':
          res.writeHead(200, json)
          return void res.end(
            JSON.stringify(
              anthropic
                ? {
                    id: 'msg_1',
                    type: 'message',
                    role: 'assistant',
                    model: 'm',
                    content: [{ type: 'text', text: answer }],
                    stop_reason: 'end_turn',
                    stop_sequence: null,
                    usage: { input_tokens: 3, output_tokens: 4 },
                  }
                : {
                    id: 'c',
                    object: 'chat.completion',
                    created: 0,
                    model: 'm',
                    choices: [
                      {
                        index: 0,
                        message: { role: 'assistant', content: answer },
                        finish_reason: 'stop',
                      },
                    ],
                  },
            ),
          )
        case 'always-503':
          res.writeHead(503, json)
          return void res.end(error('api_error', 'unavailable'))
        case 'rate-limited':
          res.writeHead(429, { ...json, 'retry-after': '30' })
          return void res.end(error('rate_limit_error', 'slow down'))
        case 'key-quoted-401': {
          const sent = String(req.headers['x-api-key'] ?? req.headers.authorization ?? '')
          res.writeHead(401, json)
          return void res.end(error('authentication_error', `Incorrect API key provided: ${sent}`))
        }
        case 'hang':
          return
        case 'declared-too-large': {
          // Past the 32 MiB bound by its header; the body trickles and never ends.
          res.writeHead(200, { ...json, 'content-length': String(40 * 1024 * 1024) })
          res.once('close', () => {
            declared.closed++
          })
          const chunk = Buffer.alloc(64 * 1024, ' ')
          const timer = setInterval(() => {
            if (res.destroyed) return clearInterval(timer)
            declared.written += chunk.length
            res.write(chunk)
          }, 20)
          return
        }
        case 'error-bomb': {
          res.writeHead(503, { 'content-type': 'text/plain' })
          const chunk = Buffer.alloc(64 * 1024, 'x')
          const more = () => {
            while (bombWritten < bombBytes && !res.destroyed) {
              bombWritten += chunk.length
              if (!res.write(chunk)) return void res.once('drain', more)
            }
            if (!res.destroyed) res.end()
          }
          return more()
        }
      }
    })
  })
  const url = await listen(server)
  return { url, seen, bombWritten: () => bombWritten, declared }
}

const policy: RelayPolicy = {
  maxAttempts: 3,
  backoff: { baseMs: 5, maxMs: 20 },
  maxWaitMs: 1_000,
  deadlineMs: 800,
}

/** The SDK clients on one path: the wrapped fetch, or the example gateway. */
async function clientsFor(path: 'createResilientFetch' | 'example gateway', base: string) {
  const outcomes: RelayOutcome[] = []
  if (path === 'createResilientFetch') {
    const fetch = createResilientFetch({
      pool: createMemoryKeyPool(keys),
      policy,
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    return { openaiBase: `${base}/v1`, anthropicBase: base, fetch, outcomes }
  }
  const gateway = await startGateway({
    openaiBaseUrl: `${base}/v1`,
    anthropicBaseUrl: base,
    keys,
    policy,
    hooks: { onOutcome: (outcome) => outcomes.push(outcome) },
  })
  cleanup(gateway.close)
  return { openaiBase: `${gateway.url}/v1`, anthropicBase: gateway.url, fetch: undefined, outcomes }
}

type Ask = (fault: Fault, maxRetries?: number) => Promise<string>

function asker(
  protocol: 'openai' | 'anthropic',
  clients: Awaited<ReturnType<typeof clientsFor>>,
): Ask {
  return async (fault, maxRetries) => {
    const common = {
      ...(clients.fetch === undefined ? {} : { fetch: clients.fetch }),
      ...(maxRetries === undefined ? {} : { maxRetries }),
      defaultHeaders: { 'x-fault-scenario': fault },
    }
    if (protocol === 'openai') {
      const client = new OpenAI({
        apiKey: 'sk-sdk-placeholder',
        baseURL: clients.openaiBase,
        ...common,
      })
      const r = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
      })
      return r.choices[0]?.message.content ?? ''
    }
    const client = new Anthropic({
      apiKey: 'sk-sdk-placeholder',
      baseURL: clients.anthropicBase,
      ...common,
    })
    const message = await client.messages.create({
      model: 'm',
      max_tokens: 16,
      messages: [{ role: 'user', content: 'hi' }],
    })
    return message.content.map((block) => (block.type === 'text' ? block.text : '')).join('')
  }
}

/** The same client asking for a stream; resolves to the text read. */
function streamAsker(
  protocol: 'openai' | 'anthropic',
  clients: Awaited<ReturnType<typeof clientsFor>>,
): (fault: Fault) => Promise<string> {
  return async (fault) => {
    const common = {
      ...(clients.fetch === undefined ? {} : { fetch: clients.fetch }),
      maxRetries: 0,
      defaultHeaders: { 'x-fault-scenario': fault },
    }
    let text = ''
    if (protocol === 'openai') {
      const client = new OpenAI({
        apiKey: 'sk-sdk-placeholder',
        baseURL: clients.openaiBase,
        ...common,
      })
      const stream = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      })
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
      return text
    }
    const client = new Anthropic({
      apiKey: 'sk-sdk-placeholder',
      baseURL: clients.anthropicBase,
      ...common,
    })
    const stream = client.messages.stream({
      model: 'm',
      max_tokens: 16,
      messages: [{ role: 'user', content: 'hi' }],
    })
    return await stream.finalText()
  }
}

async function failure(promise: Promise<unknown>): Promise<{ status: number; message: string }> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(error).toBeInstanceOf(Error)
  const { status, message } = error as { status?: number; message: string }
  return { status: status ?? 0, message }
}

describe.each(['createResilientFetch', 'example gateway'] as const)(
  'non-streaming through %s',
  (path) => {
    describe.each(['openai', 'anthropic'] as const)('with the %s SDK', (protocol) => {
      it('a 2xx answer reaches the SDK as the JSON it is', async () => {
        const up = await upstream()
        const ask = asker(protocol, await clientsFor(path, up.url))
        expect(await ask('ok')).toBe(answer)
        expect(up.seen.map((s) => s.key)).toEqual(['a'])
      })

      it('every key cooling after a 429: the answer is the library 429, and nothing leaves without a pool key', async () => {
        const up = await upstream()
        const ask = asker(protocol, await clientsFor(path, up.url))
        expect((await failure(ask('rate-limited', 0))).status).toBe(429)
        expect((await failure(ask('rate-limited', 0))).status).toBe(429)
        expect(up.seen.map((s) => s.key)).toEqual(['a', 'b'])
      })

      it('an upstream that never sends headers is bounded by the deadline: 504', async () => {
        const up = await upstream()
        const ask = asker(protocol, await clientsFor(path, up.url))
        const { status } = await failure(ask('hang'))
        expect(status).toBe(504)
      })

      it('an endless error body is read no further than its bound', async () => {
        const up = await upstream()
        const ask = asker(protocol, await clientsFor(path, up.url))
        expect((await failure(ask('error-bomb'))).status).toBe(503)
        expect(up.bombWritten()).toBeLessThan(bombBytes / 2)
      })

      it('an answer declaring a content-length past 32 MiB: 502 answer-too-large from the header, its body released unread', async () => {
        const up = await upstream()
        const clients = await clientsFor(path, up.url)
        const ask = asker(protocol, clients)
        const { status, message } = await failure(ask('declared-too-large', 0))
        expect(status).toBe(502)
        expect(message).toMatch(/larger than the 33554432 bytes/)
        expect(up.seen).toHaveLength(1)
        await expect.poll(() => up.declared.closed).toBe(1)
        expect(up.declared.written).toBeLessThan(1024 * 1024)
        await expect.poll(() => clients.outcomes[0]?.kind).toBe('failed')
        expect(clients.outcomes[0]).toMatchObject({ reason: 'answer-too-large' })
      })

      it('a streaming request answered with JSON declaring a content-length past 32 MiB: the same 502, unread', async () => {
        const up = await upstream()
        const clients = await clientsFor(path, up.url)
        const streamed = streamAsker(protocol, clients)
        const { status, message } = await failure(streamed('declared-too-large'))
        expect(status).toBe(502)
        expect(message).toMatch(/larger than the 33554432 bytes/)
        expect(up.seen).toHaveLength(1)
        await expect.poll(() => up.declared.closed).toBe(1)
        expect(up.declared.written).toBeLessThan(1024 * 1024)
      })

      it("a pool key's 401 quoting the key: 502 upstream_credentials_rejected, the key redacted", async () => {
        const up = await upstream()
        const ask = asker(protocol, await clientsFor(path, up.url))
        const { status, message } = await failure(ask('key-quoted-401'))
        expect(status).toBe(502)
        expect(message).toMatch(/rejected the gateway's credentials/)
        for (const key of keys) expect(message).not.toContain(key.secret)
        expect(up.seen.map((s) => s.key)).toEqual(['a', 'b'])
      })

      it('the SDK at its default maxRetries over an always-503 upstream: exactly maxAttempts upstream requests', async () => {
        const up = await upstream()
        const ask = asker(protocol, await clientsFor(path, up.url))
        expect((await failure(ask('always-503'))).status).toBe(503)
        expect(up.seen).toHaveLength(3)
      })
    })
  },
)

describe('relay() keeps a non-streaming answer as it is', () => {
  it('relay({ request }) with stream: false behind node:http: the openai SDK reads r.choices[0].message.content', async () => {
    const up = await upstream()
    const pool = createMemoryKeyPool(keys)
    const outcomes: RelayOutcome[] = []
    const gateway = createServer((req, res) => {
      withBody(req, (body) => {
        void relay({
          sink: nodeSink(res),
          pool,
          adapter: openaiChat,
          request: { url: `${up.url}/v1/chat/completions`, body: JSON.parse(body) },
          attempt: ({ key, signal, request }) =>
            fetch(request?.url ?? '', {
              method: 'POST',
              headers: {
                'content-type': 'application/json',
                authorization: `Bearer ${key.secret}`,
              },
              body: JSON.stringify(request?.body),
              signal,
              redirect: 'manual',
            }),
        }).then((outcome) => outcomes.push(outcome))
      })
    })
    const client = new OpenAI({ apiKey: 'sk-placeholder', baseURL: `${await listen(gateway)}/v1` })
    const r = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
    })
    expect(r.choices[0]?.message.content).toBe(answer)
    expect(r.object).toBe('chat.completion')
    await expect.poll(() => outcomes[0]?.kind).toBe('committed')
    expect(outcomes[0]).toMatchObject({ kind: 'committed', mode: 'non-streaming', eof: null })
  })
})
