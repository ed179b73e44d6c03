/**
 * The relay policy's `fitContextWindow`: on (`true`, or its options) or off, checked once.
 * The fit itself and its defaults are in `decisions/context-window.ts`.
 *
 * @module
 */

import { countNormalization } from '../../options.js'
import { normalizeContextWindowFit } from '../decisions/context-window.js'
import type { ContextWindowFitOptions, RelayPolicy } from '../shared/policy-types.js'

/** The fit's options with their defaults, or `undefined` when it is off. */
export function normalizeFit(
  fit: RelayPolicy['fitContextWindow'],
): Readonly<Required<ContextWindowFitOptions>> | undefined {
  countNormalization('fit')
  if (fit === undefined || fit === false) return undefined
  if (fit === true) return normalizeContextWindowFit({})
  if (typeof fit !== 'object' || fit === null) {
    throw new TypeError(`fitContextWindow must be a boolean or an object, got ${typeof fit}`)
  }
  return normalizeContextWindowFit(fit)
}
