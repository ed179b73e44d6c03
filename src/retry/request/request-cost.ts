/**
 * What a request is expected to spend of a key's token budget, estimated from what it states,
 * for `acquire({ cost })`: its input as the length of its JSON body over four (about four
 * characters per token in English text and JSON), plus the output it allows, the first of
 * `max_tokens` (Anthropic, OpenAI Chat), `max_completion_tokens` (OpenAI Chat),
 * `max_output_tokens` (OpenAI Responses) and Gemini's `generationConfig.maxOutputTokens`.
 * An estimate, not a count: a pool uses it to pass over a key predicted to lack that much.
 *
 * @module
 */

import type { UpstreamRequest } from '../../protocols/types.js'

/** Characters of JSON per token, the usual rule of thumb. */
const charsPerToken = 4

/** Estimates per request body: a route's body is the same object on every attempt. */
const estimates = new WeakMap<object, number>()

function outputLimit(body: Readonly<Record<string, unknown>>): number {
  const config = body.generationConfig
  const candidates = [
    body.max_tokens,
    body.max_completion_tokens,
    body.max_output_tokens,
    typeof config === 'object' && config !== null
      ? (config as Record<string, unknown>).maxOutputTokens
      : undefined,
  ]
  for (const value of candidates) {
    if (typeof value === 'number' && Number.isFinite(value) && value > 0) {
      return Math.floor(value)
    }
  }
  return 0
}

function inputTokens(body: Readonly<Record<string, unknown>>): number {
  try {
    return Math.ceil((JSON.stringify(body)?.length ?? 0) / charsPerToken)
  } catch {
    return 0 // A body that cannot be written as JSON (a cycle, a BigInt) states no size.
  }
}

/**
 * The tokens `request` is expected to spend: its input (`JSON.stringify(body).length / 4`,
 * rounded up) plus the output limit it states (0 when it states none). `undefined` without
 * a known request: the pool then chooses as if the cost were unknown. Computed once per body.
 *
 * @example
 * estimateRequestCost({ url: undefined, body: { model: 'm', max_tokens: 100 } })
 * // { tokens: 108 } (30 characters of JSON: 8 tokens, plus 100)
 */
export function estimateRequestCost(
  request: UpstreamRequest | undefined,
): { readonly tokens: number } | undefined {
  if (request === undefined) return undefined
  const { body } = request
  let tokens = estimates.get(body)
  if (tokens === undefined) {
    tokens = inputTokens(body) + outputLimit(body)
    estimates.set(body, tokens)
  }
  return { tokens }
}
