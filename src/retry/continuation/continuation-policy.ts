/**
 * The relay policy's `continueAfterCut`: its defaults and check, and what it asks of the peek
 * (the received text kept). Its options' type is in `shared/policy-types.ts`.
 *
 * @module
 */

import {
  boolean,
  countNormalization,
  positiveInteger,
  rejectUnknownKeys,
  timeoutMilliseconds,
} from '../../options.js'
import type { StreamAdapter } from '../../protocols/types.js'
import type { ContinueAfterCutOptions, NormalizedRelayPolicy } from '../shared/policy-types.js'

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
  countNormalization('continueAfterCut')
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

/** Whether `adapter` can continue a cut answer (`buildContinuation` and `spliceContinuation`). */
export function canContinue(adapter: StreamAdapter): boolean {
  return adapter.buildContinuation !== undefined && adapter.spliceContinuation !== undefined
}

/**
 * `continueAfterCut` on with no upstream adapter able to continue would never continue
 * anything, silently: a `TypeError` naming the adapters and what continues.
 */
export function checkContinuation(
  continuation: Required<ContinueAfterCutOptions> | undefined,
  upstream: readonly StreamAdapter[],
): void {
  if (continuation === undefined || upstream.some(canContinue)) return
  const names = [...new Set(upstream.map((adapter) => adapter.name))].join(', ')
  throw new TypeError(
    `policy.continueAfterCut is on but no upstream adapter can continue a cut answer (${names} has no buildContinuation and spliceContinuation): OpenAI's own API and Gemini cannot; for an OpenAI-compatible server that documents a continuation use openaiChatWith({ continuation: 'deepseek-prefix' | 'mistral-prefix' | 'vllm-continue' }); Anthropic Messages continues as it is; else leave continueAfterCut out`,
  )
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
