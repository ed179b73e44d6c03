/**
 * Stateless pieces both key pools share: the outcome kinds in counting order, and the safe
 * call of a pool's `onKeyState` hook. No class and no module state, so the Redis entry may
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
