/**
 * Issue 55, item 3, against a real upstream on 127.0.0.1: every key answers a bare 429 (no
 * `retry-after`, no rate-limit headers). Every key is tried once (the sweep: its moves to
 * untried keys are free, with no pause), then the attempts `maxAttempts` leaves reuse tried
 * keys after the documented pauses (500 ms, then 1 s, ±25 % jitter; a key still cooling is
 * waited for first), and the client gets the 429 with a `retry-after` saying when the pool
 * expects a key back. The sweep's free moves never grow the backoff: before the fix they
 * did, and the two reuses waited 6–10 s each (the 8 s cap). Each twin: `relay()` into
 * `nodeSink` and into `webSink`, and `createResilientFetch`; the memory and the Redis pool.
 * Waits are counted from `onRetry`'s `delayMs` (the delay actually waited), not wall time.
 */

import { createServer } from 'node:http'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createResilientFetch,
  fetchAttempt,
  type KeyPool,
  openaiChat,
  type PoolKey,
  type RelayHooks,
  type RelayOutcome,
  relay,
  webSink,
} from '../../src/index.js'
import { nodeHttpAttempt, nodeSink } from '../../src/node.js'
import { useRedisPools } from '../redis/redis-server.js'
import { useLoopback, withBody } from '../support/loopback.js'

type RetryContext = Parameters<NonNullable<RelayHooks['onRetry']>>[0]

const { listen } = useLoopback()
const redisPools = useRedisPools('bare-429')

const secretOf = (id: string) => `sk-bare-429-${id}-0123456789abcdef`
const keysOf = (count: number): PoolKey[] =>
  Array.from({ length: count }, (_, i) => ({ id: `k${i}`, secret: secretOf(`k${i}`) }))

/** The documented pauses before the reuses of tried keys: 500 ms, then 1 s, ±25 % jitter. */
const documented = [625, 1_250]
/** What a loaded 2-core machine may add to a timer and a loopback round trip. */
const slackMs = 400
/** A first bare 429 cools its key for `minCooldownMs` (1 s), and a waiter wakes up to 1/4 later. */
const firstCooldownMs = 1_250

/** An upstream that answers every request with a bare 429 after `delayMs`; it records the keys. */
async function bare429(delayMs: number) {
  const calls: string[] = []
  const server = createServer((req, res) => {
    withBody(req, () => {
      calls.push(req.headers.authorization?.replace(/^Bearer sk-bare-429-/, '').split('-')[0] ?? '')
      setTimeout(() => {
        res.writeHead(429, { 'content-type': 'application/json' })
        res.end('{"error":{"type":"rate_limit_error","message":"slow down"}}')
      }, delayMs)
    })
  })
  return { url: await listen(server), calls }
}

const bodyOf = (stream: boolean) => ({
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  stream,
})

/** What a request asks for: a stream or a whole answer, over `fetch` or `node:http` attempts. */
interface Ask {
  readonly stream: boolean
  readonly attempt: 'fetch' | 'node:http'
}
const streamOverFetch: Ask = { stream: true, attempt: 'fetch' }

type Twin = 'relay + nodeSink' | 'relay + webSink' | 'createResilientFetch'

interface Sent {
  status: number
  headers: Headers
  outcome: RelayOutcome
  retries: RetryContext[]
}

/** One request through `twin` with the default policy (maxAttempts 3, the default backoff). */
async function send(
  twin: Twin,
  pool: KeyPool,
  url: string,
  ask: Ask = streamOverFetch,
): Promise<Sent> {
  const body = bodyOf(ask.stream)
  const attempt = () => (ask.attempt === 'fetch' ? fetchAttempt() : nodeHttpAttempt())
  const retries: RetryContext[] = []
  const outcomes: RelayOutcome[] = []
  const hooks = { onRetry: (context: RetryContext) => void retries.push(context) }
  const onOutcome = (outcome: RelayOutcome) => void outcomes.push(outcome)
  const target = `${url}/v1/chat/completions`
  let response: Response
  if (twin === 'createResilientFetch') {
    const fetch = createResilientFetch({ pool, hooks, onOutcome })
    response = await fetch(target, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-caller' },
      body: JSON.stringify(body),
    })
  } else if (twin === 'relay + webSink') {
    const { sink, response: answer } = webSink()
    void relay({
      sink,
      pool,
      adapter: openaiChat,
      request: { url: target, body },
      attempt: attempt(),
      hooks,
    }).then(onOutcome)
    response = await answer
  } else {
    const gateway = createServer((req, res) => {
      withBody(req, () => {
        void relay({
          sink: nodeSink(res),
          pool,
          adapter: openaiChat,
          request: { url: target, body },
          attempt: attempt(),
          hooks,
        }).then(onOutcome)
      })
    })
    response = await fetch(await listen(gateway), { method: 'POST', body: JSON.stringify(body) })
  }
  await response.text()
  await expect.poll(() => outcomes.length).toBe(1)
  return {
    status: response.status,
    headers: response.headers,
    outcome: outcomes[0] as RelayOutcome,
    retries,
  }
}

/** The client's 429 carries a `retry-after` (whole seconds, within the pool's longest bare cooldown). */
function expectRetryAfter(sent: Sent) {
  expect(sent.status).toBe(429)
  const retryAfter = sent.headers.get('retry-after')
  expect(retryAfter).toMatch(/^\d+$/)
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1)
  expect(Number(retryAfter)).toBeLessThanOrEqual(10)
  // Waiting helps: the SDKs may retry it (no `x-should-retry: false`).
  expect(sent.headers.get('x-should-retry')).toBeNull()
  expect(sent.outcome.kind).toBe('failed')
  if (sent.outcome.kind !== 'failed') return
  expect(sent.outcome.status).toBe(429)
  expect(sent.outcome.retryAfterMs).toBeGreaterThanOrEqual(0)
  expect(sent.outcome.retryAfterMs).toBeLessThanOrEqual(10_000)
}

const pools = {
  memory: (keys: readonly PoolKey[]) => createMemoryKeyPool(keys),
  redis: (keys: readonly PoolKey[]) => redisPools.pool(keys),
}

const twins = ['relay + nodeSink', 'relay + webSink', 'createResilientFetch'] as const

describe.each(['memory', 'redis'] as const)('%s pool', (poolKind) => {
  describe.each(twins)('%s', (twin) => {
    it('10 keys, each a bare 429 after 150 ms: the sweep, two reuses after 500 ms and 1 s, then the 429 with retry-after', async () => {
      const keys = keysOf(10)
      const upstream = await bare429(150)
      const sent = await send(twin, pools[poolKind](keys), upstream.url)
      expectRetryAfter(sent)
      // Every key once, then the two attempts maxAttempts leaves, on tried keys.
      expect(upstream.calls).toHaveLength(12)
      expect(new Set(upstream.calls.slice(0, 10)).size).toBe(10)
      expect(upstream.calls.slice(0, 10)).toContain(upstream.calls[10])
      expect(upstream.calls.slice(0, 10)).toContain(upstream.calls[11])
      const delays = sent.retries.map((retry) => retry.delayMs)
      expect(delays).toHaveLength(11)
      // The sweep's moves to untried keys wait for nothing.
      for (const delay of delays.slice(0, 9)) expect(delay).toBeLessThanOrEqual(slackMs)
      // The sweep took 1.5 s, past the first key's 1 s cooldown: the backoff is the wait.
      expect(delays[9]).toBeLessThanOrEqual((documented[0] as number) + slackMs)
      expect(delays[10]).toBeLessThanOrEqual((documented[1] as number) + slackMs)
    }, 30_000)
  })
})

describe.each(['memory', 'redis'] as const)(
  'a whole answer (stream: false), %s pool',
  (poolKind) => {
    it.each([
      ['relay + nodeSink', 'node:http'],
      ['createResilientFetch', 'fetch'],
    ] as const)(
      '%s, %s attempts: the same sweep, pauses and retry-after',
      async (twin, attempt) => {
        const keys = keysOf(10)
        const upstream = await bare429(150)
        const sent = await send(twin, pools[poolKind](keys), upstream.url, {
          stream: false,
          attempt,
        })
        expectRetryAfter(sent)
        expect(upstream.calls).toHaveLength(12)
        expect(new Set(upstream.calls.slice(0, 10)).size).toBe(10)
        const delays = sent.retries.map((retry) => retry.delayMs)
        expect(delays).toHaveLength(11)
        for (const delay of delays.slice(0, 9)) expect(delay).toBeLessThanOrEqual(slackMs)
        expect(delays[9]).toBeLessThanOrEqual((documented[0] as number) + slackMs)
        expect(delays[10]).toBeLessThanOrEqual((documented[1] as number) + slackMs)
      },
      30_000,
    )
  },
)

describe.each(['relay + webSink', 'createResilientFetch'] as const)(
  '1,000 keys, each an instant bare 429 (memory pool, %s)',
  (twin) => {
    it('the waits after the sweep stay within the first cooldown and the documented pauses', async () => {
      const keys = keysOf(1_000)
      const upstream = await bare429(0)
      const sent = await send(twin, pools.memory(keys), upstream.url)
      expectRetryAfter(sent)
      expect(upstream.calls).toHaveLength(1_002)
      expect(new Set(upstream.calls).size).toBe(1_000)
      const delays = sent.retries.map((retry) => retry.delayMs)
      expect(delays).toHaveLength(1_001)
      const sweep = delays.slice(0, 999)
      expect(Math.max(...sweep)).toBeLessThanOrEqual(slackMs)
      // The first reuse waits for the backoff, or for the first key's 1 s cooldown if the
      // sweep was quicker than it; the second for the backoff (the next key is back by then).
      expect(delays[999]).toBeLessThanOrEqual(firstCooldownMs + slackMs)
      expect(delays[1000]).toBeLessThanOrEqual((documented[1] as number) + slackMs)
    }, 60_000)
  },
)

describe('the SDK behind createResilientFetch sees the 429 with retry-after and applies its own retries', () => {
  it('openai, maxRetries 1: one more request after the retry-after, each a full sweep, then the 429', async () => {
    const keys = keysOf(4)
    const upstream = await bare429(0)
    const client = new OpenAI({
      apiKey: 'sk-caller',
      baseURL: `${upstream.url}/v1`,
      maxRetries: 1,
      fetch: createResilientFetch({ pool: pools.memory(keys) }),
    })
    const error = await client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.RateLimitError)
    expect((error as InstanceType<typeof OpenAI.APIError>).headers?.get('retry-after')).toMatch(
      /^\d+$/,
    )
    // Each of the SDK's two requests: the four keys, then two reuses.
    expect(upstream.calls).toHaveLength(12)
  }, 30_000)
})
