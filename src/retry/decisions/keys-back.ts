/**
 * When a pool expects a key back: the `retry-after` of a 429 given up on when the upstream
 * said no wait (a bare 429), read from the pool's own cooldowns.
 *
 * @module
 */

import type { KeyPool } from '../../key-pool/types.js'
import type { FailureVerdict } from '../shared/verdict.js'

/** The longest wait said: a pool's default `maxCooldownMs`, past which a time is not meant. */
const longestMs = 3_600_000

/** A finite number, or 0 (a field absent or not a number says nothing). */
function epochOf(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0
}

/**
 * Milliseconds from `nowMs` until the earliest key of a pool snapshot (`toJSON()`) is usable
 * again: the end of its cooldown, of its open circuit, of its auth hold; 0 when one is usable
 * now. `undefined` when no key comes back by itself (none, or each disabled by an operator
 * until `enable`) or `snapshot` is not a pool's. At most an hour.
 *
 * @example
 * keysBackInMs({ version: 1, keys: [{ id: 'a', disabled: false, cooldownUntil: 5_000, failures: 0, circuit: 'closed', circuitUntil: 0 }] }, 1_000)
 * // 4000
 * @internal exported for tests
 */
export function keysBackInMs(snapshot: unknown, nowMs: number): number | undefined {
  const keys = (snapshot as { keys?: unknown } | null | undefined)?.keys
  if (!Array.isArray(keys)) return undefined
  let earliest = Number.POSITIVE_INFINITY
  for (const key of keys as unknown[]) {
    if (typeof key !== 'object' || key === null) continue
    const state = key as Record<string, unknown>
    const held = state.disabled === true ? epochOf(state.disabledUntil) : 0
    // Disabled with no end: an operator's, until `enable`.
    if (state.disabled === true && held === 0) continue
    const circuit = state.circuit === 'open' ? epochOf(state.circuitUntil) : 0
    earliest = Math.min(earliest, Math.max(epochOf(state.cooldownUntil), circuit, held))
  }
  if (!Number.isFinite(earliest)) return undefined
  return Math.min(longestMs, Math.max(0, Math.round(earliest - nowMs)))
}

/**
 * The `retry-after` (milliseconds) of a give-up on an upstream 429 that stated no wait of its
 * own (no `retry-after`, no reset header): when `pool` expects its earliest key back, from its
 * snapshot. `undefined` for any other give-up, without a pool, or when the pool cannot say (a
 * `toJSON` that throws or answers no snapshot). The client then knows when coming back may
 * help, and its SDK's own retries wait that long.
 */
export function keysBackAfter(
  verdict: FailureVerdict,
  pool: KeyPool | undefined,
  nowMs: number = Date.now(),
): number | undefined {
  if (pool === undefined || verdict.status !== 429 || verdict.retryAfterMs !== undefined) {
    return undefined
  }
  if (verdict.key.kind !== 'rate-limited') return undefined
  try {
    return keysBackInMs(pool.toJSON(), nowMs)
  } catch {
    // A host's pool whose snapshot throws: the give-up says nothing of when to come back.
    return undefined
  }
}
