/**
 * Issue 46, the retry side, against a real upstream on 127.0.0.1: a 429 belongs to one key,
 * so it uses no attempt of the request while an untried key that is not cooling remains
 * (bounded by the pool: each key once); every response's rate-limit headers reach the key's
 * report as its headroom; every acquire states the request's estimated cost. Each twin:
 * `relay()` and `createResilientFetch`, the memory and the Redis pool, a stream and a whole
 * answer.
 */

import { createServer } from 'node:http'
import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createResilientFetch,
  fetchAttempt,
  type KeyOutcome,
  type KeyPool,
  openaiChat,
  type PoolKey,
  type RelayOutcome,
  relay,
} from '../../src/index.js'
import { estimateRequestCost } from '../../src/retry/request/request-cost.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { useRedisPools } from '../redis/redis-server.js'
import { useLoopback, withBody } from '../support/loopback.js'

const { listen } = useLoopback()
const redisPools = useRedisPools('free-pass')

const ids = ['a', 'b', 'c', 'd'] as const
const secretOf = (id: string) => `sk-free-pass-${id}-0123456789abcdef`
const keys: PoolKey[] = ids.map((id) => ({ id, secret: secretOf(id) }))
const answer = 'The quick brown fox'

const limitedHeaders = {
  'retry-after': '30',
  'x-ratelimit-remaining-requests': '0',
  'x-ratelimit-reset-requests': '30s',
}
const okHeaders = {
  'x-ratelimit-remaining-requests': '41',
  'x-ratelimit-remaining-tokens': '9000',
  'x-ratelimit-reset-tokens': '2s',
}

/** An upstream where the keys in `limited` answer 429 and the others answer; it records the keys. */
async function upstreamWith(limited: ReadonlySet<string>) {
  const calls: string[] = []
  const server = createServer((req, res) => {
    withBody(req, (body) => {
      const secret = req.headers.authorization?.replace(/^Bearer /, '')
      const id = ids.find((each) => secretOf(each) === secret) ?? 'none'
      calls.push(id)
      if (limited.has(id)) {
        res.writeHead(429, { 'content-type': 'application/json', ...limitedHeaders })
        return void res.end('{"error":{"type":"rate_limit_error","message":"slow down"}}')
      }
      if ((JSON.parse(body) as { stream?: boolean }).stream === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream', ...okHeaders })
        const chunk = (delta: object, finish: string | null = null) =>
          `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
        return void res.end(`${chunk({ content: answer })}${chunk({}, 'stop')}data: [DONE]\n\n`)
      }
      res.writeHead(200, { 'content-type': 'application/json', ...okHeaders })
      const message = { role: 'assistant', content: answer }
      res.end(
        JSON.stringify({
          id: 'c',
          object: 'chat.completion',
          choices: [{ index: 0, message, finish_reason: 'stop' }],
        }),
      )
    })
  })
  return { url: await listen(server), calls }
}

/** `pool`, recording the cost of every acquire and every report of its leases. */
function recording(pool: KeyPool) {
  const costs: (number | undefined)[] = []
  const reports: { keyId: string; outcome: KeyOutcome }[] = []
  const wrapped: KeyPool = {
    acquire: async (options) => {
      costs.push(options?.cost?.tokens)
      const got = await pool.acquire(options)
      if (got.kind !== 'leased') return got
      const { lease } = got
      return {
        kind: 'leased',
        lease: {
          keyId: lease.keyId,
          secret: lease.secret,
          metadata: lease.metadata,
          commit: () => lease.commit(),
          report: (outcome) => {
            reports.push({ keyId: lease.keyId, outcome })
            return lease.report(outcome)
          },
        },
      }
    },
    enable: (id) => pool.enable(id),
    disable: (id) => pool.disable(id),
    stats: () => pool.stats(),
    toJSON: () => pool.toJSON(),
  }
  return { pool: wrapped, costs, reports }
}

const policy = { maxAttempts: 3, backoff: { baseMs: 5, maxMs: 20 }, deadlineMs: 5_000 }

type Twin = 'relay' | 'resilient-fetch'

/** One request through `twin`: its status, the text the client got, and the outcome. */
async function send(twin: Twin, pool: KeyPool, url: string, stream: boolean) {
  const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 50, stream }
  if (twin === 'relay') {
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      pool,
      adapter: openaiChat,
      request: { url: `${url}/v1/chat/completions`, body },
      policy,
      attempt: fetchAttempt(),
    })
    return { status: sink.status, text: sink.text, outcome, body }
  }
  const outcomes: RelayOutcome[] = []
  const fetch = createResilientFetch({
    pool,
    policy,
    onOutcome: (outcome) => outcomes.push(outcome),
  })
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-caller' },
    body: JSON.stringify(body),
  })
  const text = await response.text()
  await expect.poll(() => outcomes.length).toBe(1)
  return { status: response.status, text, outcome: outcomes[0] as RelayOutcome, body }
}

const pools = {
  memory: () => createMemoryKeyPool(keys),
  redis: () => redisPools.pool(keys),
}

describe.each(['relay', 'resilient-fetch'] as const)('%s', (twin) => {
  describe.each(['memory', 'redis'] as const)('%s pool', (poolKind) => {
    describe.each([
      ['stream', true],
      ['whole answer', false],
    ] as const)('%s', (_, stream) => {
      it('three keys answer 429 and the fourth has room: the client gets the answer (maxAttempts 3); every report carries its headroom and every acquire the cost', async () => {
        const upstream = await upstreamWith(new Set(['a', 'b', 'c']))
        const { pool, costs, reports } = recording(pools[poolKind]())
        const sent = await send(twin, pool, upstream.url, stream)
        expect(sent.status).toBe(200)
        expect(sent.text).toContain(answer)
        expect(sent.outcome.kind).toBe('committed')
        expect([...upstream.calls].sort()).toEqual(['a', 'b', 'c', 'd'])
        expect(upstream.calls.at(-1)).toBe('d')
        await expect.poll(() => reports.length).toBe(4)
        for (const { keyId, outcome } of reports) {
          if (keyId === 'd') {
            expect(outcome).toEqual({
              kind: 'success',
              headroom: { requestsRemaining: 41, tokensRemaining: 9000, tokensResetMs: 2000 },
            })
          } else {
            expect(outcome).toEqual({
              kind: 'rate-limited',
              retryAfterMs: 30_000,
              headroom: { requestsRemaining: 0, requestsResetMs: 30_000 },
            })
          }
        }
        // The request the relay sends (the client's body, its `stream` flag as the attempt's).
        const expected = estimateRequestCost({ url: undefined, body: sent.body })?.tokens
        expect(costs.length).toBeGreaterThanOrEqual(4)
        for (const cost of costs) expect(cost).toBe(expected)
      })

      it('every key answers 429: each key is tried once, then the client gets the 429 (no loop)', async () => {
        const upstream = await upstreamWith(new Set(ids))
        const sent = await send(twin, pools[poolKind](), upstream.url, stream)
        expect(sent.status).toBe(429)
        expect(sent.outcome.kind).toBe('failed')
        expect([...upstream.calls].sort()).toEqual(['a', 'b', 'c', 'd'])
      })
    })
  })
})
