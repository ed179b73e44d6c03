import Anthropic from '@anthropic-ai/sdk'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  type KeyStateEvent,
  type RelayOutcome,
  relay,
} from '../../src/index.js'
import {
  forgetPrefillRefusals,
  prefillRefusalMemory,
  prefillRefused,
  rememberPrefillRefusal,
} from '../../src/retry/continuation/prefill-refusals.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { createRecordingSink } from '../../src/testing/index.js'
import { leaseTotals } from '../support/leases.js'

/**
 * A model that refuses a prefill (`400 invalid_request_error: "This model does not support
 * assistant message prefill"`): the cut is told honestly, the refusal is remembered per
 * route and model (bounded, expiring) so later cuts there send no continuation request, and
 * the refusal never counts against the key. Twins: createResilientFetch over HTTP, relay();
 * the Redis pool's twin is in test/redis/continuation.test.ts.
 */

const answer = 'The quick brown fox jumps over the lazy dog.'
const cleanups: (() => Promise<void>)[] = []
beforeEach(() => forgetPrefillRefusals())
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
  forgetPrefillRefusals()
})

describe('the memory of prefill refusals', () => {
  it('remembers a refusal for its time to live, then asks again', () => {
    rememberPrefillRefusal('k', 1000)
    expect(prefillRefused('k', 1000)).toBe(true)
    expect(prefillRefused('k', 1000 + prefillRefusalMemory.ttlMs - 1)).toBe(true)
    expect(prefillRefused('k', 1000 + prefillRefusalMemory.ttlMs)).toBe(false)
    // Expired entries are gone, not only ignored.
    expect(prefillRefused('k', 0)).toBe(false)
    expect(prefillRefused('other', 1000)).toBe(false)
  })

  it(`holds at most ${prefillRefusalMemory.maxEntries} entries: the oldest goes first`, () => {
    const { maxEntries } = prefillRefusalMemory
    for (let i = 0; i <= maxEntries; i++) rememberPrefillRefusal(`k${i}`, 0)
    expect(prefillRefused('k0', 1)).toBe(false)
    expect(prefillRefused('k1', 1)).toBe(true)
    expect(prefillRefused(`k${maxEntries}`, 1)).toBe(true)
    // A refusal seen again is the newest: it outlives those remembered after it first.
    rememberPrefillRefusal('k1', 2)
    rememberPrefillRefusal('extra', 2)
    expect(prefillRefused('k1', 3)).toBe(true)
    expect(prefillRefused('k2', 3)).toBe(false)
  })
})

async function anthropicAnswer(client: Anthropic, model: string, scenario = 's') {
  let text = ''
  const stream = client.messages
    .stream(
      { model, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { 'x-fault-scenario': scenario } },
    )
    .on('text', (delta) => {
      text += delta
    })
  try {
    await stream.finalMessage()
    return { text, error: undefined }
  } catch (error) {
    return { text, error: String(error) }
  }
}

describe('continueAfterCut on a model that refuses a prefill', () => {
  it('over HTTP (createResilientFetch): told honestly, remembered per model, never against the key', async () => {
    const upstream = createFaultyUpstream({
      scenarios: { s: ['partial-then-cut'], t: ['partial-then-cut', 'ok'] },
      refusePrefill: ['claude-new'],
    })
    const url = await upstream.listen()
    cleanups.push(() => upstream.close())
    const events: KeyStateEvent[] = []
    const pool = createMemoryKeyPool(
      [
        { id: 'a', secret: 'sk-refuse-a-1234567890' },
        { id: 'b', secret: 'sk-refuse-b-1234567890' },
      ],
      { onKeyState: (event) => events.push(event) },
    )
    const outcomes: RelayOutcome[] = []
    const client = new Anthropic({
      apiKey: 'sk-x',
      baseURL: url,
      maxRetries: 0,
      fetch: createResilientFetch({
        pool,
        policy: { continueAfterCut: true },
        onOutcome: (outcome) => outcomes.push(outcome),
      }),
    })
    const first = await anthropicAnswer(client, 'claude-new')
    expect(first).toEqual({
      text: 'The quick brown fox ',
      error: expect.stringMatching(/incomplete/),
    })
    expect(upstream.requests.map((each) => each.path)).toHaveLength(2)
    await expect.poll(() => outcomes.length).toBe(1)
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'error-written', cause: 'partial-eof' },
      continuations: [{ result: 'prefill-refused', attempts: 1 }],
    })

    // The next cut on the same route and model sends no continuation request.
    const second = await anthropicAnswer(client, 'claude-new')
    expect(second).toEqual(first)
    expect(upstream.requests).toHaveLength(3)
    await expect.poll(() => outcomes.length).toBe(2)
    expect(outcomes[1]).toMatchObject({
      end: { kind: 'error-written' },
      continuations: [{ result: 'prefill-refused', attempts: 0, keyId: null }],
    })

    // Another model on the same route still continues.
    const other = await anthropicAnswer(client, 'claude-old', 't')
    expect(other).toEqual({ text: answer, error: undefined })
    expect(upstream.requests).toHaveLength(5)

    // The refusal is the request's shape, not the key: no cooldown, no breaker.
    await expect.poll(async () => (await leaseTotals(pool)).inflight).toBe(0)
    const stats = await pool.stats()
    const counted = (kind: keyof (typeof stats)[number]['outcomes']) =>
      stats.reduce((n, each) => n + each.outcomes[kind], 0)
    expect(counted('rejected')).toBe(1)
    expect(counted('success')).toBe(4)
    expect(counted('server-error') + counted('rate-limited') + counted('protocol-fault')).toBe(0)
    expect(events.filter((event) => event.state !== 'circuit-closed')).toEqual([])
    // Five leases: the cut and the refused continuation, the cut alone, the cut and its continuation.
    expect(await leaseTotals(pool)).toEqual({ inflight: 0, leased: 5, reported: 5 })
  })

  it('relay(): the same, the memory shared with every relay of the process', async () => {
    const upstream = createFaultyUpstream({
      scenarios: { s: ['partial-then-cut'] },
      refusePrefill: ['claude-new'],
    })
    const once = () =>
      relay({
        sink: createRecordingSink(),
        adapter: anthropicMessages,
        request: {
          url: 'http://upstream.test/v1/messages',
          body: {
            model: 'claude-new',
            stream: true,
            max_tokens: 64,
            messages: [{ role: 'user', content: 'hi' }],
          },
        },
        policy: { continueAfterCut: true },
        attempt: ({ signal, request }) =>
          upstream.fetch(request?.url ?? '', {
            method: 'POST',
            headers: { 'x-fault-scenario': 's' },
            body: JSON.stringify(request?.body),
            signal,
          }),
      })
    expect(await once()).toMatchObject({
      end: { kind: 'error-written' },
      continuations: [{ result: 'prefill-refused', attempts: 1 }],
    })
    expect(upstream.requests).toHaveLength(2)
    expect(upstream.requests[1]?.body).toContain('"role":"assistant"')
    expect(await once()).toMatchObject({
      continuations: [{ result: 'prefill-refused', attempts: 0 }],
    })
    expect(upstream.requests).toHaveLength(3)
  })
})
