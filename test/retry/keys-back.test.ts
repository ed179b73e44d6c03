/**
 * Issue 55, item 3: the `retry-after` of a 429 given up on when the upstream said no wait
 * comes from the pool's own cooldowns: when its earliest key is expected back.
 */

import { describe, expect, it } from 'vitest'
import type { KeyStateSnapshot } from '../../src/advanced.js'
import { createMemoryKeyPool, type KeyPool } from '../../src/index.js'
import { classifyAttemptFailure } from '../../src/retry/decisions/classify.js'
import { keysBackAfter, keysBackInMs } from '../../src/retry/decisions/keys-back.js'

const key = (over: Partial<KeyStateSnapshot>): KeyStateSnapshot => ({
  id: 'k',
  disabled: false,
  cooldownUntil: 0,
  failures: 0,
  circuit: 'closed',
  circuitUntil: 0,
  ...over,
})
const snapshot = (...keys: KeyStateSnapshot[]) => ({ version: 1 as const, keys })

const status = (code: number, headers: Record<string, string> = {}) =>
  classifyAttemptFailure({ kind: 'status', status: code, headers: new Headers(headers) })

describe('keysBackInMs: the earliest key back, from a snapshot', () => {
  it.each([
    [
      'the earliest cooldown end',
      snapshot(key({ cooldownUntil: 9_000 }), key({ cooldownUntil: 4_000 })),
      3_000,
    ],
    ['a key usable now', snapshot(key({ cooldownUntil: 9_000 }), key({ cooldownUntil: 500 })), 0],
    [
      'an open circuit lasts past its cooldown',
      snapshot(key({ circuit: 'open', circuitUntil: 7_000, cooldownUntil: 2_000 })),
      6_000,
    ],
    [
      'a half-open circuit admits its probe now',
      snapshot(key({ circuit: 'half-open', circuitUntil: 7_000 })),
      0,
    ],
    ['an auth hold ends', snapshot(key({ disabled: true, disabledUntil: 5_000 })), 4_000],
    [
      'an operator-disabled key never comes back by itself',
      snapshot(key({ disabled: true, disabledUntil: 0 }), key({ cooldownUntil: 8_000 })),
      7_000,
    ],
    ['every key disabled by an operator', snapshot(key({ disabled: true })), undefined],
    ['no keys', snapshot(), undefined],
    ['at most an hour', snapshot(key({ cooldownUntil: 1e15 })), 3_600_000],
  ] as const)('%s', (_name, given, expected) => {
    expect(keysBackInMs(given, 1_000)).toBe(expected)
  })

  it.each([undefined, null, 7, 'keys', {}, { keys: 'no' }, { keys: [null, 3] }])(
    'what is not a snapshot says nothing: %j',
    (given) => {
      expect(keysBackInMs(given, 1_000)).toBeUndefined()
    },
  )

  it('a key whose times are not numbers is taken as usable now', () => {
    expect(keysBackInMs({ keys: [{ cooldownUntil: 'x', circuit: 'open' }] }, 1_000)).toBe(0)
  })
})

describe('keysBackAfter: only a 429 that stated no wait of its own, from a pool', () => {
  it("a bare 429 after every key's bare 429: the memory pool's first cooldown (1 s)", async () => {
    const pool = createMemoryKeyPool([
      { id: 'a', secret: 'sk-keys-back-a-0123456789' },
      { id: 'b', secret: 'sk-keys-back-b-0123456789' },
    ])
    for (let i = 0; i < 2; i++) {
      const got = await pool.acquire()
      if (got.kind !== 'leased') throw new Error('expected a lease')
      await got.lease.report({ kind: 'rate-limited' })
    }
    const ms = keysBackAfter(status(429), pool)
    expect(ms).toBeGreaterThan(900)
    expect(ms).toBeLessThanOrEqual(1_000)
  })

  const pool = {
    toJSON: () => snapshot(key({ cooldownUntil: Date.now() + 5_000 })),
  } as unknown as KeyPool
  it.each([
    ['a 429 with retry-after (its own wait stands)', status(429, { 'retry-after': '7' })],
    ['a 503', status(503)],
    ['a 529', status(529)],
  ])('%s: nothing', (_name, verdict) => {
    expect(keysBackAfter(verdict, pool)).toBeUndefined()
  })

  it('without a pool, or with a toJSON that throws: nothing', () => {
    expect(keysBackAfter(status(429), undefined)).toBeUndefined()
    const throwing = {
      toJSON: () => {
        throw new Error('no snapshot')
      },
    } as unknown as KeyPool
    expect(keysBackAfter(status(429), throwing)).toBeUndefined()
  })

  it('a bare 429 and a pool that can say: its earliest key', () => {
    // One clock reading for the pool's snapshot and the question (two readings may differ by
    // a millisecond).
    const at = Date.now()
    const cooling = {
      toJSON: () => snapshot(key({ cooldownUntil: at + 5_000 })),
    } as unknown as KeyPool
    expect(keysBackAfter(status(429), cooling, at)).toBe(5_000)
  })
})
