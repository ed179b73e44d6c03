/**
 * The circuit breaker's sliding window: bucketed counts of leases started and server errors
 * reported, so memory stays bounded however busy a key is. Pure functions over plain
 * tuples, mirrored line for line by the Redis scripts.
 *
 * @module
 */

/** `[bucket start (epoch ms), leases started, server errors reported]`. */
export type WindowBucket = [start: number, leases: number, failures: number]

/** How many buckets a window is cut into: the window slides in steps of a tenth. */
const windowBuckets = 10

/** Drops buckets that left the window; true when one was dropped. */
export function pruneWindow(window: WindowBucket[], now: number, windowMs: number): boolean {
  const size = windowMs / windowBuckets
  let drop = 0
  while (drop < window.length && (window[drop] as WindowBucket)[0] + size <= now - windowMs) drop++
  if (drop > 0) window.splice(0, drop)
  return drop > 0
}

/** Adds a started lease or a failure to the bucket of `now`. */
export function countInWindow(
  window: WindowBucket[],
  now: number,
  windowMs: number,
  field: 1 | 2,
): void {
  const size = windowMs / windowBuckets
  const start = Math.floor(now / size) * size
  let last = window[window.length - 1]
  // A clock that stepped back counts into the newest bucket.
  if (last === undefined || last[0] < start) {
    last = [start, 0, 0]
    window.push(last)
    if (window.length > windowBuckets + 1) window.shift()
  }
  last[field]++
}

/** Leases started and failures reported within the window. */
export function windowTotals(window: readonly WindowBucket[]): {
  leases: number
  failures: number
} {
  let leases = 0
  let failures = 0
  for (const [, started, failed] of window) {
    leases += started
    failures += failed
  }
  return { leases, failures }
}
