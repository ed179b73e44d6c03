/**
 * The helpers every layer of the relay calls: a deadline that never aborts and the safe call
 * of a relay hook.
 *
 * @module
 */

import { callSafely } from '../../call-safely.js'

/** The deadline of a request without one: never aborts, and nothing listens to it. */
export const neverAborted: AbortSignal = new AbortController().signal

/** Calls a relay hook with its context frozen; a hook that throws is ignored. */
export function callHook<T>(hook: ((context: T) => void) | undefined, context: T): void {
  if (hook !== undefined) callSafely(hook, Object.freeze(context))
}
