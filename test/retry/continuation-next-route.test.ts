import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import type { ContinuationRecord } from '../../src/advanced.js'
import {
  anthropicMessages,
  createMemoryKeyPool,
  type KeyOutcome,
  type KeyPool,
  openaiChat,
  type RelayPolicy,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { forgetPrefillRefusals } from '../../src/retry/continuation/prefill-refusals.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { createRecordingSink } from '../../src/testing/index.js'
import { useRedisPools } from '../redis/redis-server.js'
import { leaseTotals } from '../support/leases.js'

/**
 * `continueAfterCut.nextRoute` (issue 46): a cut that cannot be continued on its own route
 * (its model refused a prefill, or its adapter cannot continue) is continued on the next route
 * of the same protocol that can; the record and `onContinuation` say where (`continuedOn`);
 * never with a model that refused a prefill; off by default. Over the memory and the Redis
 * pool. (`createResilientFetch` has one route: there is no next route to continue on.)
 */

const answer = 'The quick brown fox jumps over the lazy dog.'
const redisPools = useRedisPools('continuation-next-route')

beforeEach(() => forgetPrefillRefusals())
afterEach(() => forgetPrefillRefusals())

const bodyFor = (model: string) => ({
  model,
  stream: true,
  max_tokens: 64,
  messages: [{ role: 'user', content: 'hi' }],
})

function setup(options: {
  firstModel: string
  nextModel: string
  nextRoute: boolean | undefined
  firstAdapter?: StreamAdapter
  nextAdapter?: StreamAdapter
  pools: () => KeyPool
}) {
  const upstream = createFaultyUpstream({
    scenarios: { s: ['partial-then-cut', 'ok'] },
    refusePrefill: ['claude-new'],
  })
  const attempt = ({ signal, request }: { signal: AbortSignal; request?: unknown }) => {
    const sent = request as { url?: string; body: unknown } | undefined
    return upstream.fetch(sent?.url ?? '', {
      method: 'POST',
      headers: { 'x-fault-scenario': 's' },
      body: JSON.stringify(sent?.body),
      signal,
    })
  }
  const records: (ContinuationRecord & { route: string })[] = []
  const firstPool = options.pools()
  const nextPool = options.pools()
  const policy: RelayPolicy = {
    continueAfterCut: options.nextRoute === undefined ? true : { nextRoute: options.nextRoute },
    routes: [
      {
        name: 'second',
        adapter: options.nextAdapter ?? anthropicMessages,
        pool: nextPool,
        attempt,
        request: { url: 'http://upstream.test/v1/messages', body: bodyFor(options.nextModel) },
      },
    ],
  }
  const sink = createRecordingSink()
  const run = relay({
    sink,
    adapter: options.firstAdapter ?? anthropicMessages,
    pool: firstPool,
    attempt,
    request: { url: 'http://upstream.test/v1/messages', body: bodyFor(options.firstModel) },
    policy,
    hooks: { onContinuation: (record) => records.push(record) },
  })
  return { upstream, sink, run, records, firstPool, nextPool }
}

/** The text of an Anthropic stream as the client got it. */
function textOf(sse: string): string {
  let text = ''
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data: ')) continue
    const data = JSON.parse(line.slice(6)) as { delta?: { type?: string; text?: string } }
    if (data.delta?.type === 'text_delta') text += data.delta.text ?? ''
  }
  return text
}

const pools = {
  memory: () =>
    createMemoryKeyPool([
      { id: 'a', secret: 'sk-next-route-a-1234567890' },
      { id: 'b', secret: 'sk-next-route-b-1234567890' },
    ]),
  redis: () =>
    redisPools.pool([
      { id: 'a', secret: 'sk-next-route-a-1234567890' },
      { id: 'b', secret: 'sk-next-route-b-1234567890' },
    ]),
}

describe.each(['memory', 'redis'] as const)('continueAfterCut.nextRoute, %s pool', (kind) => {
  it('its model refused the prefill: the next route continues, seamlessly; the record and the hook say which route and model', async () => {
    const { upstream, sink, run, records, firstPool, nextPool } = setup({
      firstModel: 'claude-new',
      nextModel: 'claude-old',
      nextRoute: true,
      pools: pools[kind],
    })
    const outcome = await run
    expect(textOf(sink.text)).toBe(answer)
    const continuedOn = { route: 'second', model: 'claude-old' }
    expect(outcome).toMatchObject({
      kind: 'committed',
      route: 'primary',
      // The refusal on the cut's own route is a record of its own, before the splice.
      continuations: [
        {
          result: 'prefill-refused',
          attempts: 1,
          continuedOn: { route: 'primary', model: 'claude-new' },
        },
        { result: 'spliced', attempts: 1, continuedOn },
      ],
    })
    expect(records).toEqual([
      expect.objectContaining({ result: 'prefill-refused', route: 'primary' }),
      expect.objectContaining({ result: 'spliced', route: 'primary', continuedOn }),
    ])
    const models = upstream.requests.map(
      (each) => (JSON.parse(each.body) as { model: string }).model,
    )
    expect(models).toEqual(['claude-new', 'claude-new', 'claude-old'])
    expect(upstream.requests[2]?.body).toContain('"role":"assistant"')
    for (const pool of [firstPool, nextPool]) {
      await expect.poll(async () => (await leaseTotals(pool)).inflight).toBe(0)
    }
    expect((await leaseTotals(nextPool)).leased).toBe(1)
  })

  it('its adapter cannot continue: the next route of the same protocol continues', async () => {
    const { buildContinuation: _b, spliceContinuation: _s, ...cannot } = anthropicMessages
    const { sink, run } = setup({
      firstModel: 'claude-old',
      nextModel: 'claude-old',
      nextRoute: true,
      firstAdapter: cannot,
      pools: pools[kind],
    })
    const outcome = await run
    expect(textOf(sink.text)).toBe(answer)
    expect(outcome).toMatchObject({
      continuations: [{ result: 'spliced', continuedOn: { route: 'second', model: 'claude-old' } }],
    })
  })

  it('never with a model that refused a prefill, nor on a route of another protocol, nor when off (the default)', async () => {
    for (const options of [
      { nextModel: 'claude-new', nextRoute: true },
      { nextModel: 'claude-old', nextRoute: true, nextAdapter: openaiChat },
      { nextModel: 'claude-old', nextRoute: undefined },
      { nextModel: 'claude-old', nextRoute: false },
    ]) {
      forgetPrefillRefusals()
      const { upstream, sink, run } = setup({
        firstModel: 'claude-new',
        pools: pools[kind],
        ...options,
      })
      const outcome = await run
      expect(textOf(sink.text)).toBe('The quick brown fox ')
      expect(outcome).toMatchObject({
        end: { kind: 'error-written' },
        continuations: [{ result: 'prefill-refused', attempts: 1 }],
      })
      // The cut and the refused continuation: nothing went to the other model.
      expect(upstream.requests).toHaveLength(2)
    }
  })
})

describe('a continuation reports its key with the headroom its response stated', () => {
  it('the cut attempt and the continuation each report success with their headroom', async () => {
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    const inner = pools.memory()
    const reports: KeyOutcome[] = []
    const pool: KeyPool = {
      ...inner,
      acquire: async (options) => {
        const got = await inner.acquire(options)
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
              reports.push(outcome)
              return lease.report(outcome)
            },
          },
        }
      },
      stats: () => inner.stats(),
      toJSON: () => inner.toJSON(),
      enable: (id) => inner.enable(id),
      disable: (id) => inner.disable(id),
    }
    let served = 0
    const outcome = await relay({
      sink: createRecordingSink(),
      adapter: anthropicMessages,
      pool,
      request: { url: 'http://upstream.test/v1/messages', body: bodyFor('claude-old') },
      policy: { continueAfterCut: true },
      attempt: async ({ signal, request }) => {
        const got = await upstream.fetch(request?.url ?? '', {
          method: 'POST',
          headers: { 'x-fault-scenario': 's' },
          body: JSON.stringify(request?.body),
          signal,
        })
        const headers = new Headers(got.headers)
        headers.set('x-ratelimit-remaining-requests', String(9 - served++))
        return new Response(got.body, { status: got.status, headers })
      },
    })
    expect(outcome).toMatchObject({ continuations: [{ result: 'spliced' }] })
    await expect.poll(() => reports.length).toBe(2)
    // The continuation's lease ends first (its stream ended first), then the cut attempt's.
    expect(reports).toEqual([
      { kind: 'success', headroom: { requestsRemaining: 8 } },
      { kind: 'success', headroom: { requestsRemaining: 9 } },
    ])
  })
})
