/**
 * The built-in request adjustment: when the upstream refuses a request because input plus
 * `max_tokens` exceeds the model's context window and says the numbers, lower the output
 * budget to fit and try once more. With Anthropic's extended thinking the thinking budget is
 * lowered too, so that `max_tokens` stays above `thinking.budget_tokens`. Pure functions.
 *
 * @module
 */

import { countNormalization, positiveInteger, rejectUnknownKeys } from '../../options.js'
import { shippedAdapterNamed } from '../../protocols/adapter-for-url.js'
import type { StreamAdapter, UpstreamRequest } from '../../protocols/types.js'
import type { ContextWindowFitOptions } from '../shared/policy-types.js'

/**
 * Defaults of {@link ContextWindowFitOptions}.
 *
 * @group Retry decisions
 */
export const contextWindowFitDefaults: Readonly<Required<ContextWindowFitOptions>> = Object.freeze({
  marginTokens: 1024,
  floorTokens: 3000,
  minThinkingTokens: 1024,
})

/**
 * Merges {@link ContextWindowFitOptions} with their defaults and checks them, throwing a
 * `RangeError` that names the option (`fitContextWindow.floorTokens must be …`).
 *
 * @example
 * normalizeContextWindowFit({ floorTokens: 2000 }) // { marginTokens: 1024, floorTokens: 2000, minThinkingTokens: 1024 }
 */
export function normalizeContextWindowFit(
  options: ContextWindowFitOptions = {},
  name = 'fitContextWindow',
): Readonly<Required<ContextWindowFitOptions>> {
  countNormalization('fitContextWindow')
  rejectUnknownKeys(name, options, [
    'marginTokens',
    'floorTokens',
    'minThinkingTokens',
  ] satisfies (keyof ContextWindowFitOptions)[])
  const merged = { ...contextWindowFitDefaults, ...definedOnly(options) }
  // A margin of 0 is allowed: the caller trusts the upstream's count exactly.
  if (!Number.isSafeInteger(merged.marginTokens) || merged.marginTokens < 0) {
    throw new RangeError(
      `${name}.marginTokens must be a non-negative integer, got ${String(merged.marginTokens)}`,
    )
  }
  positiveInteger(`${name}.floorTokens`, merged.floorTokens)
  positiveInteger(`${name}.minThinkingTokens`, merged.minThinkingTokens)
  return Object.freeze(merged)
}

function definedOnly(options: ContextWindowFitOptions): ContextWindowFitOptions {
  return Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined))
}

/**
 * The numbers an overflow error states.
 *
 * @group Retry decisions
 */
export interface ContextOverflow {
  readonly inputTokens: number
  readonly limitTokens: number
}

/**
 * Reads an overflow error: Anthropic's `input length and max_tokens exceed context limit:
 * X + Y > Z`, or OpenAI's `maximum context length is Z tokens … requested T tokens (X in the
 * messages, Y in the completion)`. `undefined` when the message states no usable numbers.
 *
 * @group Retry decisions
 */
export function parseContextOverflow(message: string): ContextOverflow | undefined {
  const anthropic =
    /input length and `?max_tokens`? exceed context limit:\s*(\d+)\s*\+\s*(\d+)\s*>\s*(\d+)/i.exec(
      message,
    )
  if (anthropic !== null)
    return { inputTokens: Number(anthropic[1]), limitTokens: Number(anthropic[3]) }
  const openai =
    /maximum context length is (\d+) tokens[\s\S]*?requested (\d+) tokens(?:\s*\((\d+) in the messages)?/i.exec(
      message,
    )
  if (openai?.[3] !== undefined)
    return { inputTokens: Number(openai[3]), limitTokens: Number(openai[1]) }
  return undefined
}

/**
 * A request whose output budget fits the window the error describes, or `undefined` when it
 * cannot fit above the floor (or the error states no numbers). The adapter's
 * `fitOutputBudget` lowers its protocol's field (`max_tokens`, `max_completion_tokens`,
 * `max_output_tokens`, Gemini's `generationConfig.maxOutputTokens`), setting it if the
 * request had none; an adapter without `fitOutputBudget` is never adjusted (`undefined`).
 * The first parameter may also be a shipped adapter's name (`'anthropic-messages'`), as
 * before; an unknown name is never adjusted.
 *
 * With Anthropic's extended thinking (`thinking.budget_tokens`), `max_tokens` must stay
 * above the thinking budget, so the answer keeps at least `floorTokens` after thinking: when
 * the fitted `max_tokens` leaves less, the thinking budget is lowered to
 * `max_tokens − floorTokens`, and when that falls below `minThinkingTokens` (1,024) the
 * original error stands (`undefined`).
 *
 * @example
 * fitContextWindow(anthropicMessages, request,
 *   'input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000', {})
 * // → max_tokens: 10736
 * // with thinking.budget_tokens 16000 → max_tokens: 10736, thinking.budget_tokens: 7736
 *
 * @group Retry decisions
 */
export function fitContextWindow(
  adapter: StreamAdapter | string,
  request: UpstreamRequest,
  message: string,
  options: ContextWindowFitOptions = {},
): UpstreamRequest | undefined {
  return fitContextWindowOn(adapter, request, message, normalizeContextWindowFit(options))
}

/**
 * {@link fitContextWindow} as the relay calls it: its options were checked when the relay was
 * built (guarantee 30: nothing is normalised again per request).
 */
export function fitContextWindowOn(
  adapter: StreamAdapter | string,
  request: UpstreamRequest,
  message: string,
  options: Readonly<Required<ContextWindowFitOptions>>,
): UpstreamRequest | undefined {
  const { marginTokens, floorTokens, minThinkingTokens } = options
  // The name form predates adapters declaring their own budget fields: shipped names only.
  const protocol = typeof adapter === 'string' ? shippedAdapterNamed(adapter) : adapter
  if (protocol?.fitOutputBudget === undefined) return undefined
  const overflow = parseContextOverflow(message)
  if (overflow === undefined) return undefined
  const budget = overflow.limitTokens - overflow.inputTokens - marginTokens
  if (budget < floorTokens) return undefined
  return protocol.fitOutputBudget(request, budget, { floorTokens, minThinkingTokens })
}
