/**
 * The local fallback of one Redis outage: how it starts (a memory pool seeded with the state
 * last seen in Redis, holding a slot for each Redis lease still open), what reports and stats
 * mean while it serves, and the payload that pushes its changes back when Redis returns.
 *
 * @module
 */

import { createMemoryKeyPool } from '../key-pool/memory.js'
import {
  type AuthFailureWithoutLease,
  authFailedWithoutLease,
  outcomeKinds,
} from '../key-pool/outcomes.js'
import type { KeyOutcome, KeyPool, KeyPoolSnapshot, KeyStats, PoolKey } from '../key-pool/types.js'
import {
  type Fallback,
  type Known,
  type OpenLease,
  type OutcomeKind,
  type ScriptConfig,
  type SyncKey,
  type SyncPayload,
  syncKeyOf,
} from './replies.js'
import type { PoolSettings } from './settings.js'

/** Starts outage `id`: a local pool seeded with `baseline`, on the local clock. */
export function startFallback(
  id: string,
  keys: readonly PoolKey[],
  settings: PoolSettings,
  baseline: KeyPoolSnapshot,
): Fallback {
  // The memory pool has the lease-less auth failure; its public type does not say so.
  const pool = createMemoryKeyPool(keys, {
    ...settings.memoryOptions,
    initialState: baseline,
    now: settings.localNow,
  }) as KeyPool & AuthFailureWithoutLease
  return { id, pool, baseline, shadows: settings.ids.map(() => 0), release: [], replay: [] }
}

/** Redis leases still open hold a local slot too, and report through it. */
export function shadowOpenLeases(
  current: Fallback,
  openLeases: Iterable<OpenLease>,
  ids: readonly string[],
): void {
  for (const open of openLeases) {
    if (!open.inRedis) continue
    const others = new Set(ids.filter((_, index) => index !== open.index))
    open.shadowing = current.pool.acquire({ exclude: others }).then((result) => {
      if (result.kind !== 'leased') return
      open.local = { fallback: current, lease: result.lease }
      current.shadows[open.index] = (current.shadows[open.index] ?? 0) + 1
    })
  }
}

/**
 * A report while `current` serves: through the lease's local slot when it has one, else kept
 * for Redis (`keyId` is the lease's key; `now` stamps a replayed outcome).
 */
export async function recordLocally(
  current: Fallback,
  lease: OpenLease,
  outcome: KeyOutcome,
  keyId: string,
  now: () => number,
): Promise<void> {
  await lease.shadowing
  if (lease.local?.fallback === current) {
    await lease.local.lease.report(outcome)
    if (lease.inRedis) current.release.push(lease.id)
    return
  }
  // A Redis lease with no local slot: its key was not usable locally when the outage began,
  // or this report is what found Redis gone.
  if (outcome.kind === 'auth-failed') {
    // The timed hold a report gives, here and (with the local state) in Redis at recovery;
    // disable() would be an operator hold that never ends.
    current.pool[authFailedWithoutLease](keyId)
    current.release.push(lease.id)
    return
  }
  const retryAfterMs = retryAfterOf(outcome)
  current.replay.push({
    key: lease.index + 1,
    lease: lease.id,
    gen: lease.gen,
    kind: outcome.kind,
    ...(retryAfterMs !== undefined && Number.isFinite(retryAfterMs) ? { retryAfterMs } : {}),
    at: now(),
  })
}

/** The wait a rate-limited outcome asks for, if any. */
export function retryAfterOf(outcome: KeyOutcome): number | undefined {
  return outcome.kind === 'rate-limited' ? outcome.retryAfterMs : undefined
}

/** The stats while `current` serves: the last counts read from Redis plus this outage's. */
export async function outageStats(
  current: Fallback,
  known: readonly Known[],
): Promise<readonly KeyStats[]> {
  const shadows = current.shadows
  return (await current.pool.stats()).map((local, index) => {
    const state = known[index]
    return {
      id: local.id,
      leases: (state?.leases ?? 0) + local.leases - (shadows[index] ?? 0),
      inflight: local.inflight,
      outcomes: Object.fromEntries(
        outcomeKinds.map((kind) => [kind, (state?.outcomes[kind] ?? 0) + local.outcomes[kind]]),
      ) as Record<OutcomeKind, number>,
    }
  })
}

/**
 * What the end of outage `current` pushes back to Redis: each key's changes and counts, the
 * leases to release (the outage's and the `abandoned` acquires'), the outcomes to replay,
 * and the `openLeases` Redis must adopt.
 */
export async function resyncPayload(
  current: Fallback,
  openLeases: Iterable<OpenLease>,
  abandoned: readonly string[],
  config: ScriptConfig,
): Promise<SyncPayload> {
  const counts = await current.pool.stats()
  const local = current.pool.toJSON().keys
  const adopt = [...openLeases]
  return {
    keys: local.map((state, index): SyncKey => {
      const stats = counts[index]
      return syncKeyOf(
        state,
        current.baseline.keys[index] ?? state,
        stats === undefined
          ? []
          : [
              stats.leases - (current.shadows[index] ?? 0),
              ...outcomeKinds.map((kind) => stats.outcomes[kind]),
            ],
      )
    }),
    release: [...current.release, ...abandoned],
    replay: current.replay,
    adopt: adopt.map((open) => [open.index + 1, open.id] as const),
    config,
  }
}
