import Anthropic from '@anthropic-ai/sdk'
import { describe, expect, it } from 'vitest'
import { createResilientFetch, type RelayOutcome } from '../../src/index.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { useRedisPools } from './redis-server.js'

/**
 * The Redis pool twin of continueAfterCut: the continuation's key is leased from the shared
 * pool and its lease reported once, like the cut attempt's (invariant 11).
 */

const redisPools = useRedisPools('continuation')

describe('continueAfterCut over a Redis pool', () => {
  it('partial-then-cut reaches the Anthropic SDK whole; both leases reported, none in flight', async () => {
    const pool = redisPools.pool([
      { id: 'a', secret: 'sk-redis-a-1234567890' },
      { id: 'b', secret: 'sk-redis-b-1234567890' },
    ])
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    const outcomes: RelayOutcome[] = []
    const fetch = createResilientFetch({
      fetch: upstream.fetch,
      pool,
      policy: { continueAfterCut: true },
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    const client = new Anthropic({
      apiKey: 'sk-x',
      baseURL: 'http://upstream.test',
      fetch,
      maxRetries: 0,
      defaultHeaders: { 'x-fault-scenario': 's' },
    })
    const message = await client.messages
      .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    expect(message.content.map((b) => (b.type === 'text' ? b.text : ''))).toEqual([
      'The quick brown fox jumps over the lazy dog.',
    ])
    await expect.poll(() => outcomes.length).toBe(1)
    expect(outcomes[0]).toMatchObject({ continuations: [{ result: 'spliced' }] })
    await expect
      .poll(async () => {
        const stats = await pool.stats()
        return {
          inflight: stats.reduce((n, s) => n + s.inflight, 0),
          leases: stats.reduce((n, s) => n + s.leases, 0),
          reported: stats.reduce(
            (n, s) => n + Object.values(s.outcomes).reduce((a, b) => a + b, 0),
            0,
          ),
        }
      })
      .toEqual({ inflight: 0, leases: 2, reported: 2 })
  })

  it('a continuation that restarts (its request lost the prefill) is never appended; both leases reported, none in flight', async () => {
    const pool = redisPools.pool([
      { id: 'a', secret: 'sk-redis-a-1234567890' },
      { id: 'b', secret: 'sk-redis-b-1234567890' },
    ])
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    const outcomes: RelayOutcome[] = []
    let original: BodyInit | null | undefined
    const fetch = createResilientFetch({
      // A proxy that sends the first body it saw, whatever it is given.
      fetch: (input, init) => {
        original ??= init?.body
        return upstream.fetch(input, { ...init, body: original ?? null })
      },
      pool,
      policy: { continueAfterCut: true },
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    const client = new Anthropic({
      apiKey: 'sk-x',
      baseURL: 'http://upstream.test',
      fetch,
      maxRetries: 0,
      defaultHeaders: { 'x-fault-scenario': 's' },
    })
    let text = ''
    const stream = client.messages
      .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .on('text', (delta) => {
        text += delta
      })
    await expect(stream.finalMessage()).rejects.toThrow(/incomplete/)
    expect(text).toBe('The quick brown fox ')
    await expect.poll(() => outcomes.length).toBe(1)
    expect(outcomes[0]).toMatchObject({ continuations: [{ result: 'restarted' }] })
    await expect
      .poll(async () => {
        const stats = await pool.stats()
        return {
          inflight: stats.reduce((n, s) => n + s.inflight, 0),
          leases: stats.reduce((n, s) => n + s.leases, 0),
          cancelled: stats.reduce((n, s) => n + s.outcomes.cancelled, 0),
        }
      })
      .toEqual({ inflight: 0, leases: 2, cancelled: 1 })
  })

  it('a model that refuses a prefill: the refusal is reported as rejected (the key worked), remembered, never a cooldown', async () => {
    const pool = redisPools.pool([
      { id: 'a', secret: 'sk-redis-a-1234567890' },
      { id: 'b', secret: 'sk-redis-b-1234567890' },
    ])
    const upstream = createFaultyUpstream({
      scenarios: { s: ['partial-then-cut'] },
      refusePrefill: ['claude-refuses'],
    })
    const outcomes: RelayOutcome[] = []
    const client = new Anthropic({
      apiKey: 'sk-x',
      baseURL: 'http://upstream.test',
      fetch: createResilientFetch({
        fetch: upstream.fetch,
        pool,
        policy: { continueAfterCut: true },
        onOutcome: (outcome) => outcomes.push(outcome),
      }),
      maxRetries: 0,
      defaultHeaders: { 'x-fault-scenario': 's' },
    })
    for (let i = 0; i < 2; i++) {
      await expect(
        client.messages
          .stream({
            model: 'claude-refuses',
            max_tokens: 64,
            messages: [{ role: 'user', content: 'hi' }],
          })
          .finalMessage(),
      ).rejects.toThrow(/incomplete/)
    }
    await expect.poll(() => outcomes.length).toBe(2)
    expect(outcomes.map((each) => each.kind === 'committed' && each.continuations)).toEqual([
      [expect.objectContaining({ result: 'prefill-refused', attempts: 1 })],
      [expect.objectContaining({ result: 'prefill-refused', attempts: 0 })],
    ])
    expect(upstream.requests).toHaveLength(3)
    await expect
      .poll(async () => {
        const stats = await pool.stats()
        return {
          inflight: stats.reduce((n, s) => n + s.inflight, 0),
          leases: stats.reduce((n, s) => n + s.leases, 0),
          rejected: stats.reduce((n, s) => n + s.outcomes.rejected, 0),
          success: stats.reduce((n, s) => n + s.outcomes.success, 0),
        }
      })
      .toEqual({ inflight: 0, leases: 3, rejected: 1, success: 2 })
    // Both keys are still free to lease: nothing cools.
    const first = await pool.acquire({})
    const second = await pool.acquire({})
    expect([first.kind, second.kind]).toEqual(['leased', 'leased'])
    for (const got of [first, second]) {
      if (got.kind === 'leased') await got.lease.report({ kind: 'cancelled' })
    }
  })
})
