/**
 * Stateless pieces both key pools share: the outcome kinds in counting order, the safe call
 * of a pool's `onKeyState` hook, and the memory pool's lease-less auth failure that the
 * Redis pool's outage fallback calls. No class and no module state, so the Redis entry may
 * carry its own copy (tsup.config.ts `copyable`).
 *
 * @module
 */

import type { KeyOutcome, KeyStateEvent } from './types.js'

/** Every outcome kind, in the order stats and the Redis scripts count them. */
export const outcomeKinds: readonly KeyOutcome['kind'][] = Object.freeze([
  'success',
  'rate-limited',
  'auth-failed',
  'server-error',
  'overloaded',
  'protocol-fault',
  'client-gone',
  'rejected',
  'cancelled',
])

/** Calls a state hook with a frozen event; a hook that throws is ignored. */
export function tellKeyState(
  hook: ((event: KeyStateEvent) => void) | undefined,
  event: KeyStateEvent,
): void {
  if (hook === undefined) return
  try {
    hook(Object.freeze(event))
  } catch {
    // A hook that throws is ignored.
  }
}

/**
 * Where a memory pool keeps its auth failure without a lease (`Symbol.for`: the Redis entry's
 * copy of this module agrees). The Redis pool's outage fallback calls it for a Redis lease
 * that got no local slot, so its key gets the timed hold a report gives, not `disable()`'s
 * operator hold, which would reach Redis at recovery and never end.
 */
export const authFailedWithoutLease: unique symbol = Symbol.for(
  'stream-boundary.keyPool.authFailedWithoutLease',
)

/** A pool that takes an `auth-failed` outcome for a key it has no lease of: the memory pool. */
export interface AuthFailureWithoutLease {
  /** Counts the outcome and holds the key for `authDisableMs`, as a lease's report would. */
  readonly [authFailedWithoutLease]: (keyId: string) => void
}
