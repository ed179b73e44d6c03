import type { KeyPool } from '../../src/index.js'

/** A pool's lease counts over all its keys: in flight now, leased, and outcomes reported. */
export async function leaseTotals(pool: KeyPool) {
  const stats = await pool.stats()
  return {
    inflight: stats.reduce((n, s) => n + s.inflight, 0),
    leased: stats.reduce((n, s) => n + s.leases, 0),
    reported: stats.reduce((n, s) => n + Object.values(s.outcomes).reduce((a, b) => a + b, 0), 0),
  }
}

/**
 * `pool` with `latencyMs` of (fake or real) time on every `acquire` and lease `report`, the
 * way a shared store answers: attempts go on settling while the relay awaits the pool.
 */
export function withLatency(pool: KeyPool, latencyMs: number): KeyPool {
  if (latencyMs <= 0) return pool
  const later = () => new Promise((resolve) => setTimeout(resolve, latencyMs))
  return {
    acquire: async (options) => {
      await later()
      const got = await pool.acquire(options)
      if (got.kind !== 'leased') return got
      const { lease } = got
      return {
        ...got,
        lease: {
          keyId: lease.keyId,
          secret: lease.secret,
          metadata: lease.metadata,
          commit: () => lease.commit(),
          report: async (outcome) => {
            await later()
            await lease.report(outcome)
          },
        },
      }
    },
    enable: (id) => pool.enable(id),
    disable: (id) => pool.disable(id),
    stats: () => pool.stats(),
    toJSON: () => pool.toJSON(),
  }
}
