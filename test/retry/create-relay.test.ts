/**
 * `createRelay()`: a bad option of what is built fails when it is built, with `relay()`'s
 * message; a bad option of a request is answered to its client and rejects, as `relay()`
 * does; a request's own attempt function and hooks join the built ones.
 */

import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createRelay,
  createResilientFetch,
  openaiChat,
  type RelayPolicy,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/index.js'
import { finish, role, text } from '../support/chat-frames.js'
import { scriptedUpstream } from '../support/upstream.js'

const pool = () => createMemoryKeyPool([{ id: 'a', secret: 'sk-create-relay-a-123456' }])
const ok = () =>
  scriptedUpstream([{ steps: [{ bytes: role }, { bytes: text('hi') }, { bytes: finish }] }])

/** What relay() rejects with for `policy`. */
async function relayRefusal(policy: unknown): Promise<unknown> {
  return relay({
    sink: createRecordingSink(),
    pool: pool(),
    adapter: openaiChat,
    attempt: ok().attempt,
    policy: policy as RelayPolicy,
  }).catch((error: unknown) => error)
}

describe('createRelay', () => {
  const badPolicies: [string, unknown][] = [
    ['maxAttempts: 0', { maxAttempts: 0 }],
    ['a misspelled option', { maxAtempts: 2 }],
    ['peek.firstOutputTimeoutMs: 0', { peek: { firstOutputTimeoutMs: 0 } }],
    ['keepAliveIntervalMs: -1', { keepAliveIntervalMs: -1 }],
    ['continueAfterCut.timeoutMs: 0', { continueAfterCut: { timeoutMs: 0 } }],
    ['nonStreamingFallback: 1', { nonStreamingFallback: 1 }],
    ['fitContextWindow.floorTokens: 0', { fitContextWindow: { floorTokens: 0 } }],
    ['hedge: {}', { hedge: {} }],
    ['a route without an attempt function', { routes: [{ adapter: openaiChat, attempt: 1 }] }],
  ]
  for (const [name, policy] of badPolicies) {
    it(`a bad policy (${name}) throws when the relay is built, with relay()'s error`, async () => {
      const expected = await relayRefusal(policy)
      expect(expected).toBeInstanceOf(Error)
      expect(() =>
        createRelay({ pool: pool(), adapter: openaiChat, policy: policy as RelayPolicy }),
      ).toThrow(expected as Error)
    })
  }

  it('a bad pool, adapter or attempt function throws when it is built; a per-request option given to it is named', () => {
    const adapter = openaiChat
    expect(() => createRelay({ pool: {} as never, adapter })).toThrow(
      new TypeError('pool must be a KeyPool (or left out when the caller owns the credentials)'),
    )
    expect(() => createRelay({ adapter: {} as never })).toThrow(
      new TypeError('adapter must be a StreamAdapter'),
    )
    expect(() => createRelay({ adapter, attempt: 'fetch' as never })).toThrow(
      new TypeError('attempt must be a function'),
    )
    expect(() => createRelay({ adapter, sink: createRecordingSink() } as never)).toThrow(
      new TypeError(
        'createRelay: "sink" belongs to each request: pass it to the function createRelay() returns',
      ),
    )
    expect(() => createRelay({ adapter, hooks: { onComit: () => {} } } as never)).toThrow(
      /createRelay: hooks: unknown option "onComit"; did you mean "onCommit"\?/,
    )
  })

  it('createResilientFetch, its twin, builds its relay when it is made: a bad route or hook name throws there', () => {
    const adapter = openaiChat
    expect(() =>
      createResilientFetch({ adapter, policy: { routes: [{ adapter, attempt: 1 as never }] } }),
    ).toThrow(new TypeError('attempt must be a function'))
    expect(() => createResilientFetch({ adapter, hooks: { onComit: () => {} } as never })).toThrow(
      /relay: hooks: unknown option "onComit"; did you mean "onCommit"\?/,
    )
  })

  it('a bad request option is answered to the client through the sink, and the call rejects with it', async () => {
    const chat = createRelay({ pool: pool(), adapter: openaiChat, attempt: ok().attempt })
    const sink = createRecordingSink()
    await expect(chat({ sink, stream: 'yes' as never })).rejects.toThrow(
      new TypeError('stream must be a boolean, got string'),
    )
    expect(sink.status).toBe(500)
    expect(sink.text).toContain('the gateway is misconfigured: stream must be a boolean')
    await expect(chat({ sink: {} as never })).rejects.toThrow(
      new TypeError('sink must be a DownstreamSink'),
    )
    const noAttempt = createRelay({ pool: pool(), adapter: openaiChat })
    const other = createRecordingSink()
    await expect(noAttempt({ sink: other })).rejects.toThrow(
      new TypeError('attempt must be a function'),
    )
    expect(other.status).toBe(500)
  })

  it("a request's attempt function replaces the built one, and its hooks run after the built ones", async () => {
    const built = ok()
    const own = ok()
    const order: string[] = []
    const chat = createRelay({
      pool: pool(),
      adapter: openaiChat,
      attempt: built.attempt,
      hooks: {
        onCommit: () => order.push('built'),
        onOutcome: () => {
          order.push('built outcome')
          throw new Error('a hook that throws')
        },
      },
    })
    const first = await chat({
      sink: createRecordingSink(),
      attempt: own.attempt,
      hooks: {
        onCommit: () => order.push('own'),
        onOutcome: () => order.push('own outcome'),
      },
    })
    expect(first.result).toBe('completed')
    expect([built.calls.length, own.calls.length]).toEqual([0, 1])
    expect(order).toEqual(['built', 'own', 'built outcome', 'own outcome'])
    const second = await chat({ sink: createRecordingSink() })
    expect(second.result).toBe('completed')
    expect([built.calls.length, own.calls.length]).toEqual([1, 1])
  })
})
