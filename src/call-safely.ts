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

/**
 * How long a release of user code is waited for: a body's `cancel()`, an iterator's `return()`.
 * Past it the release goes on by itself and the request moves on (invariant 29): a generator
 * stalled in an `await`, or a stream whose `cancel()` never settles, cannot hold a request.
 */
const releaseGraceMs = 100

/**
 * Waits for `pending` (a release in user code) at most `ms`, and never rejects. The timer is
 * request-scoped (it holds the process, like every wait a request depends on) and cleared as
 * soon as `pending` settles.
 */
export function settleWithin(pending: unknown, ms: number = releaseGraceMs): Promise<void> {
  if (typeof (pending as { then?: unknown } | null)?.then !== 'function') return Promise.resolve()
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer)
      resolve()
    }
    const timer = setTimeout(resolve, ms)
    Promise.resolve(pending).then(done, done)
  })
}
