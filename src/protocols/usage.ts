/**
 * Token usage as each protocol reports it, read into one shape: in a stream (OpenAI Chat's
 * usage chunk, Responses' `response.completed`, Anthropic's `message_start` and
 * `message_delta`, Gemini's `usageMetadata`) and in a whole JSON answer alike.
 *
 * @module
 */

import { field } from './common.js'
import type { FrameVerdict, TokenUsage } from './types.js'

export type { TokenUsage } from './types.js'

/** A count: a non-negative safe integer, else nothing. */
function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined
}

/** The fields that were reported, as a usage; `undefined` when none was. */
function usage(fields: Record<keyof TokenUsage, number | undefined>): TokenUsage | undefined {
  let out: Record<string, number> | undefined
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined) continue
    out ??= {}
    out[key] = value
  }
  return out
}

/** OpenAI Chat Completions' `usage` object. */
export function chatUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  return usage({
    inputTokens: count(field(value, 'prompt_tokens')),
    outputTokens: count(field(value, 'completion_tokens')),
    cachedInputTokens: count(field(field(value, 'prompt_tokens_details'), 'cached_tokens')),
    cacheCreationInputTokens: undefined,
    reasoningTokens: count(field(field(value, 'completion_tokens_details'), 'reasoning_tokens')),
  })
}

/** OpenAI Responses' `usage` object. */
export function responsesUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  return usage({
    inputTokens: count(field(value, 'input_tokens')),
    outputTokens: count(field(value, 'output_tokens')),
    cachedInputTokens: count(field(field(value, 'input_tokens_details'), 'cached_tokens')),
    cacheCreationInputTokens: undefined,
    reasoningTokens: count(field(field(value, 'output_tokens_details'), 'reasoning_tokens')),
  })
}

/**
 * Anthropic's `usage` object. Its `input_tokens` excludes cached input, so the cache reads
 * and writes are added to it: `inputTokens` is every input token, as in the other protocols.
 */
export function anthropicUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const input = count(field(value, 'input_tokens'))
  const read = count(field(value, 'cache_read_input_tokens'))
  const written = count(field(value, 'cache_creation_input_tokens'))
  return usage({
    inputTokens: input === undefined ? undefined : input + (read ?? 0) + (written ?? 0),
    outputTokens: count(field(value, 'output_tokens')),
    cachedInputTokens: read,
    cacheCreationInputTokens: written,
    reasoningTokens: undefined,
  })
}

/** Gemini's `usageMetadata` object. */
export function geminiUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const candidates = count(field(value, 'candidatesTokenCount'))
  const thoughts = count(field(value, 'thoughtsTokenCount'))
  return usage({
    inputTokens: count(field(value, 'promptTokenCount')),
    outputTokens:
      candidates === undefined && thoughts === undefined
        ? undefined
        : (candidates ?? 0) + (thoughts ?? 0),
    cachedInputTokens: count(field(value, 'cachedContentTokenCount')),
    cacheCreationInputTokens: undefined,
    reasoningTokens: thoughts,
  })
}

/**
 * Two reports of one answer's usage as one, field by field: a stream reports usage in steps
 * (Anthropic's input at `message_start`, output at `message_delta`), each step's counts
 * cumulative, so the larger of two counts is the later one (and a step that leaves a field
 * out, or reports it without the cache counts, never lowers it).
 */
export function mergeUsage(
  earlier: TokenUsage | undefined,
  later: TokenUsage | undefined,
): TokenUsage | undefined {
  // An adapter is the host's code: whatever it reported that is not a count is left out.
  if (typeof later !== 'object' || later === null) return earlier
  const merged: Record<string, number> = { ...earlier }
  let any = earlier !== undefined
  for (const key of usageKeys) {
    const value = count((later as Record<string, unknown>)[key])
    if (value === undefined) continue
    merged[key] = Math.max(merged[key] ?? 0, value)
    any = true
  }
  return any ? merged : undefined
}

/**
 * Two answers' usage added field by field (a continuation's to the cut answer's): a field
 * either reported counts; `undefined` when neither reported any.
 */
export function addUsage(
  one: TokenUsage | undefined,
  other: TokenUsage | undefined,
): TokenUsage | undefined {
  if (one === undefined) return other
  if (other === undefined) return one
  const sum: Record<string, number> = {}
  for (const key of usageKeys) {
    const a = one[key]
    const b = other[key]
    if (a !== undefined || b !== undefined) sum[key] = (a ?? 0) + (b ?? 0)
  }
  return sum
}

/** Every field of {@link TokenUsage}: a table the compiler keeps complete. */
const usageKeys = Object.keys({
  inputTokens: true,
  outputTokens: true,
  cachedInputTokens: true,
  cacheCreationInputTokens: true,
  reasoningTokens: true,
} satisfies Record<keyof TokenUsage, true>) as (keyof TokenUsage)[]

/** A verdict with the usage its frame reported attached (keep-alives and errors carry none). */
export function withUsage(verdict: FrameVerdict, reported: TokenUsage | undefined): FrameVerdict {
  if (reported === undefined || verdict.kind === 'keepalive' || verdict.kind === 'error')
    return verdict
  return { ...verdict, usage: reported }
}
