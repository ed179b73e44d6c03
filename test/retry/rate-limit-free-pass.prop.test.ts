/**
 * Issue 46, point 1, as a property over pools of keys that answer 429 (with or without
 * `retry-after`), answer, or cool already, and every `maxAttempts`: a 429 belongs to one key,
 * so the request is never refused while a key that is neither cooling nor tried could serve
 * it; and the free attempts are bounded by the pool (each key at most once per free pass, no
 * loop when every key answers 429). Both twins (`relay()`, `createResilientFetch`), a stream
 * and a whole answer, the memory and the Redis pool.
 */

import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createResilientFetch,
  type KeyPool,
  openaiChat,
  type PoolKey,
  type RelayOutcome,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { useRedisPools } from '../redis/redis-server.js'
import { runs } from '../support/runs.js'

const redisPools = useRedisPools('free-pass-prop')

/** What one key does: answer 429 (with `retry-after` or bare), answer, or cool already. */
type KeyKind = 'limited' | 'limited-bare' | 'ok' | 'cooling-ok' | 'cooling-limited'

const secretOf = (index: number) => `sk-prop-key-${index}-0123456789abcdef`
const answer = 'The quick brown fox'

function respond(kind: KeyKind, stream: boolean): Response {
  if (kind !== 'ok' && kind !== 'cooling-ok') {
    const headers: Record<string, string> = { 'content-type': 'application/json' }
    if (kind !== 'limited-bare') headers['retry-after'] = '30'
    return new Response('{"error":{"type":"rate_limit_error","message":"slow down"}}', {
      status: 429,
      headers,
    })
  }
  if (stream) {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    return new Response(`${chunk({ content: answer })}${chunk({}, 'stop')}data: [DONE]\n\n`, {
      headers: { 'content-type': 'text/event-stream' },
    })
  }
  const message = { role: 'assistant', content: answer }
  return Response.json({
    id: 'c',
    object: 'chat.completion',
    choices: [{ index: 0, message, finish_reason: 'stop' }],
  })
}

interface Case {
  readonly kinds: readonly KeyKind[]
  readonly maxAttempts: number
  readonly stream: boolean
  readonly twin: 'relay' | 'resilient-fetch'
}

const cases = fc.record({
  kinds: fc.array(
    fc.constantFrom<KeyKind>('limited', 'limited-bare', 'ok', 'cooling-ok', 'cooling-limited'),
    { minLength: 1, maxLength: 6 },
  ),
  maxAttempts: fc.integer({ min: 1, max: 4 }),
  stream: fc.boolean(),
  twin: fc.constantFrom('relay' as const, 'resilient-fetch' as const),
})

/** Cools the keys whose kind says so, as an earlier request's 429 would (60 s). */
async function coolAhead(pool: KeyPool, kinds: readonly KeyKind[]): Promise<void> {
  const cooling = kinds.flatMap((kind, index) => (kind.startsWith('cooling') ? [`k${index}`] : []))
  for (const id of cooling) {
    const exclude = new Set(kinds.map((_, index) => `k${index}`).filter((other) => other !== id))
    const got = await pool.acquire({ exclude })
    if (got.kind !== 'leased') throw new Error(`could not lease ${id} to cool it`)
    await got.lease.report({ kind: 'rate-limited', retryAfterMs: 60_000 })
  }
}

// `maxWaitMs` short: a bare 429 cools its key for the pool's 1 s floor, and waiting that out
// (real time, per case) is not what this property is about: an untried key needs no wait.
const policy = (maxAttempts: number) => ({
  maxAttempts,
  backoff: { baseMs: 1, maxMs: 5 },
  deadlineMs: 5_000,
  maxWaitMs: 100,
})

/** Sends one request through the twin; the keys (indexes) the upstream saw, and the answer. */
async function send(test: Case, pool: KeyPool) {
  const calls: number[] = []
  const upstream = (secret: string | undefined) => {
    const index = test.kinds.findIndex((_, i) => secretOf(i) === secret)
    calls.push(index)
    return respond(test.kinds[index] ?? 'limited', test.stream)
  }
  const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: test.stream }
  if (test.twin === 'relay') {
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      pool,
      adapter: openaiChat,
      request: { url: 'http://upstream.test/v1/chat/completions', body },
      policy: policy(test.maxAttempts),
      attempt: async (context) => upstream(context.key.secret),
    })
    return { calls, status: sink.status, outcome }
  }
  let outcome: RelayOutcome | undefined
  const fetch = createResilientFetch({
    pool,
    policy: policy(test.maxAttempts),
    fetch: async (_input, init) =>
      upstream(new Headers(init?.headers).get('authorization')?.replace(/^Bearer /, '')),
    onOutcome: (told) => {
      outcome = told
    },
  })
  const response = await fetch('http://upstream.test/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-caller' },
    body: JSON.stringify(body),
  })
  await response.text()
  await expect.poll(() => outcome).toBeDefined()
  return { calls, status: response.status, outcome: outcome as RelayOutcome }
}

async function check(test: Case, pool: KeyPool): Promise<void> {
  await coolAhead(pool, test.kinds)
  const { calls, status, outcome } = await send(test, pool)
  const couldServe = test.kinds.some((kind) => kind === 'ok')
  if (couldServe) {
    expect(status).toBe(200)
    expect(outcome.kind).toBe('committed')
  }
  if (status === 429) {
    // Every key that could have served was cooling or tried.
    for (const [index, kind] of test.kinds.entries()) {
      if (kind === 'ok') expect(calls).toContain(index)
    }
  }
  // A cooling key is never leased; free attempts are bounded by the pool: every key that is
  // not cooling once, and `maxAttempts` on top at most.
  for (const index of calls) expect(test.kinds[index]?.startsWith('cooling')).toBe(false)
  const usable = test.kinds.filter((kind) => !kind.startsWith('cooling')).length
  expect(calls.length).toBeLessThanOrEqual(usable + test.maxAttempts)
}

const keysOf = (kinds: readonly KeyKind[]): PoolKey[] =>
  kinds.map((_, index) => ({ id: `k${index}`, secret: secretOf(index) }))

describe('rate limits use no attempt while an untried key remains', () => {
  it('memory pool: a request never gets a 429 while a key that is neither cooling nor tried could serve it within its deadline', async () => {
    await fc.assert(
      fc.asyncProperty(cases, (test) => check(test, createMemoryKeyPool(keysOf(test.kinds)))),
      { numRuns: runs(60) },
    )
  })

  it('Redis pool: a request never gets a 429 while a key that is neither cooling nor tried could serve it within its deadline', async () => {
    await fc.assert(
      fc.asyncProperty(cases, (test) => check(test, redisPools.pool(keysOf(test.kinds)))),
      { numRuns: runs(25) },
    )
  })
})
