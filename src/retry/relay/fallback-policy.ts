/**
 * The relay policy's `nonStreamingFallback`: its default and its check.
 *
 * @module
 */

import { countNormalization, positiveMilliseconds, rejectUnknownKeys } from '../../options.js'
import type { RelayPolicy } from '../shared/policy-types.js'

/** The non-streaming fallback's own timeout (shorter when the deadline leaves less). */
export const fallbackTimeoutDefaultMs = 300_000

/**
 * The fallback's timeout, or `undefined` when the fallback is off; a `TypeError` or
 * `RangeError` naming a bad option.
 */
export function normalizeFallback(
  fallback: RelayPolicy['nonStreamingFallback'],
): number | undefined {
  countNormalization('nonStreamingFallback')
  if (fallback === undefined || fallback === false) return undefined
  if (fallback === true) return fallbackTimeoutDefaultMs
  if (typeof fallback !== 'object' || fallback === null) {
    throw new TypeError(
      `nonStreamingFallback must be a boolean or an object, got ${typeof fallback}`,
    )
  }
  rejectUnknownKeys('policy.nonStreamingFallback', fallback, ['timeoutMs'])
  return positiveMilliseconds(
    'nonStreamingFallback.timeoutMs',
    fallback.timeoutMs ?? fallbackTimeoutDefaultMs,
  )
}
