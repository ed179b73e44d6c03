import { describe, expect, it } from 'vitest'
import { memoryKeyPoolDefaults } from '../../src/advanced.js'
import { createMemoryKeyPool } from '../../src/index.js'
import { describePoolContract } from './pool-contract.js'
import { describeSelectionContract } from './selection-contract.js'

describePoolContract('memory pool', async (keys, options) => createMemoryKeyPool(keys, options))
describeSelectionContract('memory pool', async (keys, options) =>
  createMemoryKeyPool(keys, options),
)

describe('createMemoryKeyPool', () => {
  const keys = (entries: [string, number?][]) =>
    entries.map(([id, weight]) => ({
      id,
      secret: `sk-${id}-1234567890`,
      ...(weight === undefined ? {} : { weight }),
    }))

  async function draw(pool: ReturnType<typeof createMemoryKeyPool>, count: number, hold = false) {
    const ids: string[] = []
    for (let i = 0; i < count; i++) {
      const result = await pool.acquire()
      if (result.kind !== 'leased') throw new Error(result.kind)
      ids.push(result.lease.keyId)
      if (!hold) await result.lease.report({ kind: 'success' })
    }
    return ids
  }

  it('weighted selection follows the weights smoothly', async () => {
    const pool = createMemoryKeyPool(
      keys([
        ['a', 3],
        ['b', 1],
      ]),
      { selection: 'weighted' },
    )
    const ids = await draw(pool, 8)
    expect(ids.filter((id) => id === 'a')).toHaveLength(6)
    expect(ids.slice(0, 4).sort()).toEqual(['a', 'a', 'a', 'b'])
  })

  it('least-inflight prefers the key with fewest open leases', async () => {
    const pool = createMemoryKeyPool(keys([['a'], ['b'], ['c']]), { selection: 'least-inflight' })
    expect(await draw(pool, 3, true)).toEqual(['a', 'b', 'c'])
    const stats = await pool.stats()
    expect(stats.map((s) => s.inflight)).toEqual([1, 1, 1])
  })

  it('documents its defaults and validates keys and options with exact messages', () => {
    expect(memoryKeyPoolDefaults).toMatchObject({
      selection: 'round-robin',
      defaultCooldownMs: 10_000,
      maxCooldownMs: 3_600_000,
      failureThreshold: 5,
      breakerWindowMs: 30_000,
      breakerFailureRatio: 0.5,
      circuitOpenMs: 30_000,
      authDisableMs: 300_000,
      minCooldownMs: 1_000,
      headroomHorizonMs: 60_000,
      latencyHalfLifeMs: 10_000,
    })
    for (const option of ['minCooldownMs', 'headroomHorizonMs', 'latencyHalfLifeMs'] as const) {
      expect(() => createMemoryKeyPool([], { [option]: 0 })).toThrow(
        `${option} must be a positive number of milliseconds up to 2147483647, got 0`,
      )
      expect(() => createMemoryKeyPool([], { [option]: Number.POSITIVE_INFINITY })).toThrow(
        `${option} must be a positive number of milliseconds up to 2147483647, got Infinity`,
      )
    }
    for (const selection of ['headroom', 'fastest'] as const) {
      expect(() => createMemoryKeyPool([], { selection })).not.toThrow()
    }
    expect(() => createMemoryKeyPool([], { breakerFailureRatio: 1.5 })).toThrow(
      'breakerFailureRatio must be a number in (0, 1], got 1.5',
    )
    expect(() => createMemoryKeyPool([], { breakerWindowMs: 0 })).toThrow(
      'breakerWindowMs must be a positive number of milliseconds up to 2147483647, got 0',
    )
    expect(() => createMemoryKeyPool([], { authDisableMs: Number.POSITIVE_INFINITY })).toThrow(
      'authDisableMs must be a positive number of milliseconds up to 2147483647, got Infinity',
    )
    expect(() => createMemoryKeyPool([], { maxCooldownMs: 0 })).toThrow(
      'maxCooldownMs must be a positive number of milliseconds up to 2147483647, got 0',
    )
    expect(() => createMemoryKeyPool([], { maxCooldownMs: Number.POSITIVE_INFINITY })).toThrow(
      'maxCooldownMs must be a positive number of milliseconds up to 2147483647, got Infinity',
    )
    expect(() =>
      createMemoryKeyPool([
        { id: 'a', secret: 'x' },
        { id: 'a', secret: 'y' },
      ]),
    ).toThrow('Key id "a" appears twice')
    expect(() => createMemoryKeyPool([{ id: 'a', secret: '' }])).toThrow(
      'Key "a" needs a non-empty secret',
    )
    expect(() => createMemoryKeyPool([], { failureThreshold: 0 })).toThrow(
      'failureThreshold must be a positive number, got 0',
    )
    expect(() => createMemoryKeyPool([], { selection: 'random' as never })).toThrow(
      "selection must be 'round-robin', 'weighted', 'least-inflight', 'headroom' or 'fastest', got random",
    )
  })

  it('loads a version 1 snapshot written before headroom and fastest selection existed; its own snapshot is still version 1 with the same fields', async () => {
    const saved = {
      version: 1 as const,
      keys: [
        {
          id: 'a',
          disabled: false,
          disabledUntil: 0,
          cooldownUntil: 5_000,
          failures: 0,
          circuit: 'closed' as const,
          circuitUntil: 0,
        },
        {
          id: 'b',
          disabled: false,
          cooldownUntil: 0,
          failures: 0,
          circuit: 'closed' as const,
          circuitUntil: 0,
        },
      ],
    }
    for (const selection of ['headroom', 'fastest'] as const) {
      const pool = createMemoryKeyPool(keys([['a'], ['b']]), {
        selection,
        initialState: saved,
        now: () => 1_000,
      })
      const first = await pool.acquire()
      expect(first.kind === 'leased' && first.lease.keyId).toBe('b')
      if (first.kind === 'leased') {
        first.lease.commit()
        await first.lease.report({ kind: 'success', headroom: { requestsRemaining: 3 } })
      }
      const snapshot = pool.toJSON()
      expect(snapshot.version).toBe(1)
      expect(snapshot.keys.map((key) => Object.keys(key).sort())).toEqual([
        ['circuit', 'circuitUntil', 'cooldownUntil', 'disabled', 'disabledUntil', 'failures', 'id'],
        ['circuit', 'circuitUntil', 'cooldownUntil', 'disabled', 'disabledUntil', 'failures', 'id'],
      ])
      expect(snapshot.keys[0]?.cooldownUntil).toBe(5_000)
    }
  })

  it('never puts a secret in an error message', () => {
    let message = ''
    try {
      createMemoryKeyPool([{ id: 'a', secret: 'sk-live-abcdef', weight: -1 }])
    } catch (error) {
      message = (error as Error).message
    }
    expect(message).toBe('weight of key "a" must be a positive number, got -1')
  })
})
