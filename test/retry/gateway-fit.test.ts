import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  type CallerCredentialsAttemptFunction,
  createMemoryKeyPool,
  openaiChat,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

afterEach(() => {
  vi.useRealTimers()
})

const ok: Behaviour = { steps: [{ bytes: fixtureBytes('openai-chat/text.sse') }] }
const keys = (...ids: string[]) => ids.map((id) => ({ id, secret: `sk-secret-${id}-0123456789` }))
const headOf = (sink: ReturnType<typeof createRecordingSink>) => {
  const head = sink.events.find((event) => event.type === 'head')
  return head?.type === 'head' ? head.headers : new Headers()
}

describe('caller-owned credentials (no pool)', () => {
  it("a 401 for the caller's own key reaches the client as 401 with the upstream's body, after one attempt", async () => {
    const body =
      '{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}'
    const upstream = scriptedUpstream([
      { status: 401, headers: { 'x-request-id': 'req_1' }, steps: [{ bytes: body }] },
    ])
    const sink = createRecordingSink()
    const seen: unknown[] = []
    const attempt: CallerCredentialsAttemptFunction = (context) => {
      seen.push(context.key)
      return upstream.attempt({
        ...context,
        key: { id: 'caller', secret: 'x', metadata: undefined },
      })
    }
    const outcome = await relay({ sink, adapter: openaiChat, attempt })
    expect(upstream.calls).toHaveLength(1)
    expect(seen).toEqual([undefined])
    expect(outcome).toMatchObject({ kind: 'failed', status: 401 })
    expect(outcome.attempts[0]?.keyId).toBeNull()
    expect(sink.status).toBe(401)
    expect(JSON.parse(sink.text)).toEqual(JSON.parse(body))
    expect(headOf(sink).get('x-request-id')).toBe('req_1')
    expect(headOf(sink).get('x-should-retry')).toBe('false')
  })

  it('a 503 then ok is retried on the same credentials; the outcome reports both attempts', async () => {
    const upstream = scriptedUpstream([
      { status: 503, steps: [{ bytes: '{"error":{"message":"busy"}}' }] },
      ok,
    ])
    const attempt: CallerCredentialsAttemptFunction = (context) =>
      upstream.attempt({ ...context, key: { id: 'caller', secret: 'x', metadata: undefined } })
    const outcome = await relay({
      sink: createRecordingSink(),
      adapter: openaiChat,
      attempt,
      policy: { backoff: { baseMs: 5 } },
    })
    expect(outcome).toMatchObject({ kind: 'committed', keyId: null })
    expect(outcome.attempts.map((a) => a.result)).toEqual(['status-503', 'committed'])
  })
})

describe('upstream errors pass through', () => {
  const body =
    '{"error":{"message":"max_tokens is too large","type":"invalid_request_error","param":"max_tokens","code":"bad"}}'
  const refused: Behaviour = {
    status: 400,
    headers: {
      'content-type': 'application/json',
      'x-request-id': 'req_42',
      'openai-organization': 'org-secret',
    },
    steps: [{ bytes: body }],
  }

  it('the final upstream error keeps its status, its body (param and code included) and its request id', async () => {
    const sink = createRecordingSink()
    const upstream = scriptedUpstream([refused])
    const outcome = await relay({
      sink,
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: upstream.attempt,
    })
    expect(outcome).toMatchObject({ kind: 'failed', status: 400 })
    expect(sink.status).toBe(400)
    expect(JSON.parse(sink.text)).toEqual(JSON.parse(body))
    expect(headOf(sink).get('x-request-id')).toBe('req_42')
    expect(headOf(sink).get('openai-organization')).toBeNull()
  })

  it('a secret the upstream echoes in its error body is redacted', async () => {
    const sink = createRecordingSink()
    const upstream = scriptedUpstream([
      { status: 400, steps: [{ bytes: '{"error":{"message":"bad key sk-secret-a-0123456789"}}' }] },
    ])
    await relay({
      sink,
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: upstream.attempt,
    })
    expect(sink.text).not.toContain('sk-secret-a-0123456789')
  })

  it('passThroughErrors: false renders the failure in the protocol shape instead', async () => {
    const sink = createRecordingSink()
    const upstream = scriptedUpstream([refused])
    await relay({
      sink,
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { passThroughErrors: false },
    })
    expect(sink.status).toBe(400)
    const rendered = JSON.parse(sink.text) as { error: Record<string, unknown> }
    expect(rendered.error.message).toBe('max_tokens is too large')
    expect(rendered.error.param ?? null).toBeNull()
  })

  it("a pool key's 401 is the gateway's credential: never passed to the client as its own 401", async () => {
    const sink = createRecordingSink()
    const upstream = scriptedUpstream([
      { status: 401, steps: [{ bytes: '{"error":{"message":"invalid x-api-key"}}' }] },
    ])
    const outcome = await relay({
      sink,
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: upstream.attempt,
    })
    expect(outcome.kind).toBe('failed')
    expect(sink.status).not.toBe(401)
    expect(sink.status).toBeGreaterThanOrEqual(500)
  })

  it('library-made failures (an empty stream) are rendered in the protocol shape, never as a pass-through', async () => {
    const sink = createRecordingSink()
    const empty: Behaviour = {
      steps: [{ bytes: 'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n' }],
    }
    const upstream = scriptedUpstream([empty])
    await relay({
      sink,
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { maxAttempts: 1 },
    })
    expect(sink.status).toBe(502)
    expect(JSON.parse(sink.text)).toMatchObject({ error: { type: 'upstream_error' } })
  })
})

describe("a gateway's own retry settings", () => {
  it('retryOn: a status list decides which upstream HTTP failures are retried', async () => {
    const run = async (retryOn: number[]) => {
      const upstream = scriptedUpstream([{ status: 400 }, { status: 503 }, ok])
      const outcome = await relay({
        sink: createRecordingSink(),
        pool: createMemoryKeyPool(keys('a', 'b', 'c')),
        adapter: openaiChat,
        attempt: upstream.attempt,
        policy: { retryOn },
      })
      return { outcome, calls: upstream.calls.length }
    }
    expect(await run([400, 503])).toMatchObject({ calls: 3, outcome: { kind: 'committed' } })
    expect(await run([503])).toMatchObject({ calls: 1, outcome: { kind: 'failed', status: 400 } })
  })

  it('retryOn: a predicate returning undefined keeps the library rule', async () => {
    const upstream = scriptedUpstream([{ status: 503 }, ok])
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a', 'b')),
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { retryOn: ({ status }) => (status === 418 ? true : undefined) },
    })
    expect(outcome.kind).toBe('committed')
  })

  it('maxWaitMs caps how long a Retry-After is honoured: beyond it the client gets 429 with retry-after at once', async () => {
    useFakeClock()
    const limited: Behaviour = { status: 429, headers: { 'retry-after': '20' } }
    const capped = scriptedUpstream([limited, ok])
    const sink = createRecordingSink()
    const fast = await relay({
      sink,
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: capped.attempt,
      policy: { maxWaitMs: 1_000 },
    })
    expect(capped.calls).toHaveLength(1)
    expect(fast).toMatchObject({ kind: 'failed', status: 429 })
    expect(headOf(sink).get('retry-after')).toBe('20')
    expect(headOf(sink).get('x-should-retry')).toBeNull()

    const patient = scriptedUpstream([limited, ok])
    const pending = relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a')),
      adapter: openaiChat,
      attempt: patient.attempt,
    })
    await vi.advanceTimersByTimeAsync(19_000)
    expect(patient.calls).toHaveLength(1)
    // The 20 s wait, then at most a quarter of it (1 s at most) spread so that requests
    // waiting for the same key do not all wake at once.
    await vi.advanceTimersByTimeAsync(1_000 + 1_000 + 100)
    expect(await pending).toMatchObject({ kind: 'committed' })
    expect(patient.calls).toHaveLength(2)
  })

  it('the attempt count is on every outcome', async () => {
    const upstream = scriptedUpstream([{ status: 503 }, ok])
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys('a', 'b')),
      adapter: openaiChat,
      attempt: upstream.attempt,
    })
    expect(outcome.attempts).toHaveLength(2)
  })
})
