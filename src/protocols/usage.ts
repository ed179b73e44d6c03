/**
 * Token usage as each protocol reports it, read into one shape: in a stream (OpenAI Chat's
 * usage chunk, Responses' `response.completed`, Anthropic's `message_start` and
 * `message_delta`, Gemini's `usageMetadata`) and in a whole JSON answer alike. One merge rule
 * for every protocol: the later report wins, field by field ({@link mergeUsage}).
 *
 * @module
 */

import { field } from './common.js'
import type { FrameVerdict, TokenUsage } from './types.js'

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

/**
 * OpenAI Chat Completions' `usage` object. `completion_tokens` includes reasoning in OpenAI's
 * convention; some compatible servers (xAI) leave it out, which the report's own total tells:
 * reasoning is added to `outputTokens` only when `total_tokens` is prompt + completion +
 * reasoning (12 + 1 + 290 = 303 gives 291 output tokens).
 */
function chatUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const input = count(field(value, 'prompt_tokens'))
  const completion = count(field(value, 'completion_tokens'))
  const reasoning = count(field(field(value, 'completion_tokens_details'), 'reasoning_tokens'))
  const reasoningApart =
    input !== undefined &&
    completion !== undefined &&
    reasoning !== undefined &&
    reasoning > 0 &&
    count(field(value, 'total_tokens')) === input + completion + reasoning
  return usage({
    inputTokens: input,
    outputTokens: reasoningApart ? completion + reasoning : completion,
    cachedInputTokens: count(field(field(value, 'prompt_tokens_details'), 'cached_tokens')),
    cacheCreationInputTokens: undefined,
    reasoningTokens: reasoning,
  })
}

/**
 * The usage report of a Chat Completions chunk or whole answer: its `usage`, or Groq's
 * `x_groq.usage` when `usage` is absent (or `null`, as on the chunks before the last).
 */
export function chatUsageOf(body: unknown): TokenUsage | undefined {
  return chatUsage(field(body, 'usage') ?? field(field(body, 'x_groq'), 'usage'))
}

/** OpenAI Responses' `usage` object (its `output_tokens` includes reasoning). */
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
 * Anthropic reports whose `inputTokens` lack cache counts the report left out: a later
 * report's `input_tokens` is added to the cache counts an earlier one gave ({@link mergeUsage}).
 */
const cacheLeftOut = new WeakSet<TokenUsage>()

/** One Anthropic input count: `input_tokens` plus the cache reads and writes beside it. */
function anthropicInput(value: unknown): {
  input: number | undefined
  read: number | undefined
  written: number | undefined
} {
  const input = count(field(value, 'input_tokens'))
  const read = count(field(value, 'cache_read_input_tokens'))
  const written = count(field(value, 'cache_creation_input_tokens'))
  return {
    input: input === undefined ? undefined : input + (read ?? 0) + (written ?? 0),
    read,
    written,
  }
}

/** The sum of one count over Anthropic's `iterations`, `undefined` when none reports it. */
function sumOver<T>(
  iterations: readonly T[],
  read: (iteration: T) => number | undefined,
): number | undefined {
  let sum: number | undefined
  for (const iteration of iterations) {
    const value = read(iteration)
    if (value !== undefined) sum = (sum ?? 0) + value
  }
  return sum
}

/**
 * Anthropic's `usage` object. Its `input_tokens` excludes cached input, so the cache reads
 * and writes are added to it: `inputTokens` is every input token, as in the other protocols.
 * With `iterations` (compaction: a summarising step, then the message), what is billed is
 * the sum over the iterations, so the counts are those sums (60385 + 612 input, 522 + 2819
 * output), where the top level gives the last iteration only. An iteration that names a
 * `model` of its own (the advisor tool's `advisor_message`) ran another model and is left out.
 * `output_tokens_details.thinking_tokens` is reasoning.
 */
export function anthropicUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const top = anthropicInput(value)
  const iterations = field(value, 'iterations')
  // An iteration that names a model of its own (an advisor's) ran another model, billed at
  // that model's rates: the request's usage is what its own model ran.
  const own = Array.isArray(iterations)
    ? iterations.filter((step) => field(step, 'model') === undefined)
    : []
  const steps = own.length > 0 ? own : undefined
  const input = steps === undefined ? top : sumOfSteps(steps, top)
  const reported = usage({
    inputTokens: input.input,
    outputTokens:
      steps === undefined
        ? count(field(value, 'output_tokens'))
        : (sumOver(steps, (step) => count(field(step, 'output_tokens'))) ??
          count(field(value, 'output_tokens'))),
    cachedInputTokens: input.read,
    cacheCreationInputTokens: input.written,
    reasoningTokens: count(field(field(value, 'output_tokens_details'), 'thinking_tokens')),
  })
  if (reported !== undefined && input.read === undefined && input.written === undefined)
    cacheLeftOut.add(reported)
  return reported
}

/** Input and cache counts summed over `iterations`; the top level's where none reports one. */
function sumOfSteps(
  steps: readonly unknown[],
  top: ReturnType<typeof anthropicInput>,
): ReturnType<typeof anthropicInput> {
  const each = steps.map(anthropicInput)
  const read = sumOver(each, (step) => step.read)
  const written = sumOver(each, (step) => step.written)
  const input = sumOver(each, (step) => step.input)
  if (input === undefined) return top
  // Cache counts only the top level gave are added as for a report without iterations.
  const extra =
    (read === undefined ? (top.read ?? 0) : 0) + (written === undefined ? (top.written ?? 0) : 0)
  return { input: input + extra, read: read ?? top.read, written: written ?? top.written }
}

/**
 * Gemini's `usageMetadata` object, a snapshot of the answer so far. `inputTokens` adds the
 * built-in tools' prompt (`toolUsePromptTokenCount`) to `promptTokenCount`; `outputTokens`
 * adds `thoughtsTokenCount` to `candidatesTokenCount`, either of which may be absent.
 */
export function geminiUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const prompt = count(field(value, 'promptTokenCount'))
  const toolPrompt = count(field(value, 'toolUsePromptTokenCount'))
  const candidates = count(field(value, 'candidatesTokenCount'))
  const thoughts = count(field(value, 'thoughtsTokenCount'))
  return usage({
    inputTokens:
      prompt === undefined && toolPrompt === undefined
        ? undefined
        : (prompt ?? 0) + (toolPrompt ?? 0),
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
 * Two reports of one answer's usage as one, field by field: the later report wins, and a
 * field it leaves out keeps its earlier value. Every protocol's later report is its final
 * word (Anthropic's `message_delta` after `message_start`, Gemini's last `usageMetadata`
 * snapshot), even when its count is lower. An Anthropic report that gives `input_tokens`
 * but leaves the cache counts out keeps the earlier cache counts in `inputTokens`.
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
    merged[key] = value
    any = true
  }
  if (
    cacheLeftOut.has(later) &&
    merged.inputTokens !== undefined &&
    later.inputTokens !== undefined
  )
    merged.inputTokens += (merged.cachedInputTokens ?? 0) + (merged.cacheCreationInputTokens ?? 0)
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
  if (reported === undefined || verdict.kind === 'keepalive') return verdict
  return { ...verdict, usage: reported }
}
