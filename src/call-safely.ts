/**
 * Calling the host's hooks and reading the clock, one way everywhere. No imports: subpath
 * entries carry their own copy (see `tsup.config.ts`).
 *
 * @module
 */

/**
 * Calls `hook` with `args` when there is one; a hook that throws is ignored (a hook must
 * never break what it observes).
 */
export function callSafely<A extends unknown[]>(
  hook: ((...args: A) => void) | undefined,
  ...args: A
): void {
  if (hook === undefined) return
  try {
    hook(...args)
  } catch {
    // Ignored: the hook's own failure is not the request's.
  }
}

/** The library's one clock for durations: monotonic milliseconds. */
export const now = (): number => performance.now()
