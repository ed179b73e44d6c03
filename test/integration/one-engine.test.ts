import { createServer, type ServerResponse } from 'node:http'
import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createResilientFetch,
  type RelayOutcome,
  type RelayPolicy,
} from '../../src/index.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * One engine (invariant 16): a streaming request and its non-streaming twin, with a pool and
 * without one, meet each upstream fault with the same decisions: the same number of upstream
 * requests, the same keys, the same bounds and the same answer. With a pool, no request ever
 * leaves without a leased key.
 */

const { listen } = useLoopback()

const secrets = { a: 'sk-pool-a-0123456789abcdef', b: 'sk-pool-b-0123456789abcdef' }
const callerSecret = 'sk-caller-own-0123456789abcdef'
const answer = 'The quick brown fox'

type Fault = 'always-503' | 'rate-limited' | 'key-quoted-401' | 'hang' | 'error-bomb' | 'empty-once'

function keyOf(authorization: string | undefined): string {
  const secret = authorization?.replace(/^Bearer /, '')
  if (secret === secrets.a) return 'a'
  if (secret === secrets.b) return 'b'
  if (secret === callerSecret) return 'caller'
  return `none(${authorization ?? ''})`
}

/** The answer, or (`empty`) one with neither output nor an end: a role chunk, then EOF. */
function sendAnswer(res: ServerResponse, streaming: boolean, empty: boolean): void {
  if (streaming) {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    if (empty) return void res.end(chunk({ role: 'assistant' }))
    return void res.end(`${chunk({ content: answer })}${chunk({}, 'stop')}data: [DONE]\n\n`)
  }
  res.writeHead(200, { 'content-type': 'application/json' })
  const message = { role: 'assistant', content: answer }
  const choices = empty ? [] : [{ index: 0, message, finish_reason: 'stop' }]
  res.end(JSON.stringify({ id: 'c', object: 'chat.completion', choices }))
}

/** An upstream that meets every request with `fault`, recording the key each one carried. */
async function upstreamWith(fault: Fault) {
  const keys: string[] = []
  let bombBytesWritten = 0
  const bombBytes = 48 * 1024 * 1024
  const server = createServer((req, res) => {
    withBody(req, (body) => {
      keys.push(keyOf(req.headers.authorization))
      const streaming = (JSON.parse(body) as { stream?: boolean }).stream === true
      const json = { 'content-type': 'application/json' }
      switch (fault) {
        case 'always-503':
          res.writeHead(503, json)
          return void res.end('{"error":{"type":"server_error","message":"unavailable"}}')
        case 'rate-limited':
          res.writeHead(429, { ...json, 'retry-after': '30' })
          return void res.end('{"error":{"type":"rate_limit_error","message":"slow down"}}')
        case 'key-quoted-401': {
          const sent = req.headers.authorization?.replace(/^Bearer /, '') ?? ''
          res.writeHead(401, json)
          return void res.end(
            JSON.stringify({
              error: {
                type: 'invalid_request_error',
                message: `Incorrect API key provided: ${sent}`,
              },
            }),
          )
        }
        case 'hang':
          return // never a header
        case 'error-bomb': {
          res.writeHead(503, { 'content-type': 'text/plain' })
          const chunk = Buffer.alloc(64 * 1024, 'x')
          const more = () => {
            while (bombBytesWritten < bombBytes && !res.destroyed) {
              bombBytesWritten += chunk.length
              if (!res.write(chunk)) return void res.once('drain', more)
            }
            if (!res.destroyed) res.end()
          }
          return more()
        }
        case 'empty-once':
          return sendAnswer(res, streaming, keys.length === 1)
      }
    })
  })
  const url = await listen(server)
  return { url, keys, bombBytesWritten: () => bombBytesWritten, bombBytes }
}

/** What one request met and answered: what must be the same for its twins. */
interface Trace {
  readonly upstreamRequests: number
  readonly keys: readonly string[]
  readonly status: number
  readonly shouldRetry: string | null
  readonly retryAfter: string | null
  readonly text: string
  readonly outcome: string
}

const policy: RelayPolicy = {
  maxAttempts: 3,
  backoff: { baseMs: 5, maxMs: 20 },
  maxWaitMs: 1_000,
  deadlineMs: 600,
}

async function trace(fault: Fault, stream: boolean, pooled: boolean): Promise<Trace> {
  const upstream = await upstreamWith(fault)
  const outcomes: RelayOutcome[] = []
  const pool = createMemoryKeyPool([
    { id: 'a', secret: secrets.a },
    { id: 'b', secret: secrets.b },
  ])
  const fetch = createResilientFetch({
    policy,
    onOutcome: (outcome) => outcomes.push(outcome),
    ...(pooled ? { pool } : {}),
  })
  const send = () =>
    fetch(`${upstream.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${callerSecret}` },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream }),
    })
  let response = await send()
  // Every key cools or is disabled after a rate limit or a 401: a second request must not
  // leave without a pool key (it gets the library's answer instead).
  if (pooled && (fault === 'rate-limited' || fault === 'key-quoted-401')) {
    await response.body?.cancel()
    response = await send()
  }
  const body = await response.text()
  const text = stream
    ? body
        .split('\n')
        .filter((line) => line.startsWith('data: {'))
        .map((line) => {
          const parsed = JSON.parse(line.slice(6)) as {
            choices?: { delta?: { content?: string } }[]
          }
          return parsed.choices?.[0]?.delta?.content ?? ''
        })
        .join('')
    : ((JSON.parse(body) as { choices?: { message?: { content?: string } }[] }).choices?.[0]
        ?.message?.content ?? '')
  for (const secret of [...Object.values(secrets), callerSecret]) expect(body).not.toContain(secret)
  if (fault === 'error-bomb') expect(upstream.bombBytesWritten()).toBeLessThan(upstream.bombBytes)
  await expect.poll(() => outcomes.length).toBeGreaterThan(0)
  const last = outcomes.at(-1) as RelayOutcome
  return {
    upstreamRequests: upstream.keys.length,
    keys: upstream.keys,
    status: response.status,
    shouldRetry: response.headers.get('x-should-retry'),
    retryAfter: response.headers.get('retry-after'),
    text,
    outcome: last.kind === 'failed' ? `failed:${last.reason}` : last.kind,
  }
}

const faults: readonly Fault[] = [
  'always-503',
  'rate-limited',
  'key-quoted-401',
  'hang',
  'error-bomb',
  'empty-once',
]

describe('one engine: streaming and non-streaming twins decide alike', () => {
  describe.each([
    ['with a pool', true],
    ['without a pool', false],
  ] as const)('%s', (_, pooled) => {
    it.each(faults)('%s: the same upstream requests, keys, bounds and answer', async (fault) => {
      const streaming = await trace(fault, true, pooled)
      const whole = await trace(fault, false, pooled)
      expect(whole).toEqual({ ...streaming, text: whole.text })
      expect(whole.text).toBe(streaming.text)
      if (pooled) {
        // No attempt leaves without a leased key.
        expect(streaming.keys.every((key) => key === 'a' || key === 'b')).toBe(true)
      } else {
        expect(streaming.keys.every((key) => key === 'caller')).toBe(true)
      }
      const expected: Record<Fault, Partial<Trace>> = {
        'always-503': { upstreamRequests: 3, status: 503, shouldRetry: 'false' },
        'rate-limited': pooled
          ? { upstreamRequests: 2, status: 429, retryAfter: '30', shouldRetry: null }
          : { upstreamRequests: 1, status: 429 },
        'key-quoted-401': pooled
          ? { upstreamRequests: 2, status: 502, shouldRetry: 'false' }
          : { upstreamRequests: 1, status: 401, shouldRetry: 'false' },
        hang: { status: 504, shouldRetry: 'false', outcome: 'failed:deadline' },
        'error-bomb': { upstreamRequests: 3, status: 503, shouldRetry: 'false' },
        'empty-once': { upstreamRequests: 2, status: 200, text: answer, outcome: 'committed' },
      }
      expect(streaming).toMatchObject(expected[fault])
    })
  })
})
