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
