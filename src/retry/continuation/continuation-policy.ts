/**
 * The relay policy's `continueAfterCut`: its defaults and check, and what it asks of the peek
 * (the received text kept). Its options' type is in `shared/policy-types.ts`.
 *
 * @module
 */

import { boolean, positiveInteger, rejectUnknownKeys, timeoutMilliseconds } from '../../options.js'
import type { ContinueAfterCutOptions, NormalizedRelayPolicy } from '../shared/policy-types.js'

export type { ContinueAfterCutOptions } from '../shared/policy-types.js'

/**
 * Defaults of {@link ContinueAfterCutOptions} (what `continueAfterCut: true` means).
 *
 * @group Relay
 */
export const continueAfterCutDefaults = Object.freeze({
  maxContinuations: 1,
  maxAttempts: 2,
  timeoutMs: 30_000,
  maxReceivedChars: 262_144,
  nextRoute: false,
})

const continuationKeys = Object.keys({
  maxContinuations: true,
  maxAttempts: true,
  timeoutMs: true,
  maxReceivedChars: true,
  nextRoute: true,
} satisfies Record<keyof ContinueAfterCutOptions, true>)

export function normalizeContinuation(
  given: boolean | ContinueAfterCutOptions | undefined,
): Required<ContinueAfterCutOptions> | undefined {
  if (given === undefined || given === false) return undefined
  const defaults = continueAfterCutDefaults
  if (given === true) return defaults
  if (typeof given !== 'object' || given === null) {
    throw new TypeError(
      `continueAfterCut must be a boolean or an object, got ${given === null ? 'null' : typeof given}`,
    )
  }
  rejectUnknownKeys('policy.continueAfterCut', given, continuationKeys)
  return {
    nextRoute: boolean('continueAfterCut.nextRoute', given.nextRoute ?? defaults.nextRoute),
    maxContinuations: positiveInteger(
      'continueAfterCut.maxContinuations',
      given.maxContinuations ?? defaults.maxContinuations,
    ),
    maxAttempts: positiveInteger(
      'continueAfterCut.maxAttempts',
      given.maxAttempts ?? defaults.maxAttempts,
    ),
    timeoutMs: timeoutMilliseconds(
      'continueAfterCut.timeoutMs',
      given.timeoutMs ?? defaults.timeoutMs,
    ),
    maxReceivedChars: positiveInteger(
      'continueAfterCut.maxReceivedChars',
      given.maxReceivedChars ?? defaults.maxReceivedChars,
    ),
  }
}

/**
 * The peek's tracker keeps the received text when continuation is on (one more character
 * than the bound, so a text past it is known to be past it).
 */
export function withKeptText(
  peek: NormalizedRelayPolicy['peek'],
  continuation: Required<ContinueAfterCutOptions> | undefined,
): NormalizedRelayPolicy['peek'] {
  if (continuation === undefined) return peek
  const kept = peek.trackerOptions?.keepTextChars ?? 0
  const keepTextChars = Math.max(kept, continuation.maxReceivedChars + 1)
  return { ...peek, trackerOptions: { ...peek.trackerOptions, keepTextChars } }
}
