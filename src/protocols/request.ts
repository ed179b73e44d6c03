/**
 * Request-side facts the shipped adapters share: credential headers, endpoint paths, the
 * `stream` flag and output-budget fields. Pure functions; each adapter picks its own.
 *
 * @module
 */

import type { OutputBudgetLimits, UpstreamRequest } from './types.js'

/** OpenAI's credential: `authorization: Bearer <key>`. */
export function bearerCredential(secret: string): readonly [string, string] {
  return ['authorization', `Bearer ${secret}`]
}

/** An `invalidRequest` for a protocol whose body names its model (OpenAI, Anthropic). */
export function modelNamedInBody(body: Readonly<Record<string, unknown>>): string | undefined {
  const model = body.model
  if (typeof model === 'string' && model !== '') return undefined
  return model === undefined
    ? 'the request has no `model`'
    : `\`model\` must be a non-empty string, got ${model === '' ? 'an empty string' : typeof model}`
}

/** A `matchesUrl` for an endpoint whose path ends with `suffix` (a trailing `/` allowed). */
export function pathEndsWith(suffix: string): (url: URL) => boolean {
  return (url) => {
    const path = url.pathname.endsWith('/') ? url.pathname.slice(0, -1) : url.pathname
    return path.endsWith(suffix)
  }
}

/** Whether a JSON body says `"stream": true` (the cheap check first, then the parse). */
export function streamFlagInBody(_url: URL, body: string | undefined): boolean {
  if (body === undefined || !body.includes('"stream"')) return false
  try {
    return (JSON.parse(body) as { stream?: unknown }).stream === true
  } catch {
    return false
  }
}

/**
 * A `fitOutputBudget` over top-level fields: every field the request sets is lowered to the
 * budget; when it sets none, the first field is set.
 */
export function fitTopLevelBudget(
  fields: readonly [string, ...string[]],
): (request: UpstreamRequest, budgetTokens: number) => UpstreamRequest {
  return (request, budgetTokens) => {
    const present = fields.filter((name) => typeof request.body[name] === 'number')
    const body: Record<string, unknown> = { ...request.body }
    for (const name of present.length > 0 ? present : fields.slice(0, 1)) {
      const current = body[name]
      body[name] = typeof current === 'number' ? Math.min(current, budgetTokens) : budgetTokens
    }
    return { url: request.url, body }
  }
}

/** Anthropic's extended thinking as a request states it, when it has a numeric budget. */
function thinkingBudget(body: Readonly<Record<string, unknown>>): number | undefined {
  const thinking = body.thinking
  if (typeof thinking !== 'object' || thinking === null) return undefined
  const { type, budget_tokens: budget } = thinking as Record<string, unknown>
  return type === 'enabled' && typeof budget === 'number' ? budget : undefined
}

const fitMaxTokens = fitTopLevelBudget(['max_tokens'])

/**
 * Anthropic's fit: `max_tokens` lowered, and with extended thinking the thinking budget too,
 * because `max_tokens` must stay above `thinking.budget_tokens` with at least `floorTokens`
 * left for the answer. Below `minThinkingTokens` (Anthropic rejects less than 1,024) the
 * request cannot fit.
 */
export function fitAnthropicBudget(
  request: UpstreamRequest,
  budgetTokens: number,
  limits: OutputBudgetLimits,
): UpstreamRequest | undefined {
  const fitted = fitMaxTokens(request, budgetTokens)
  const maxTokens = fitted.body.max_tokens as number
  const thinking = thinkingBudget(request.body)
  if (thinking === undefined || maxTokens - thinking >= limits.floorTokens) return fitted
  const lowered = maxTokens - limits.floorTokens
  if (lowered < limits.minThinkingTokens) return undefined
  return {
    url: fitted.url,
    body: {
      ...fitted.body,
      thinking: { ...(request.body.thinking as object), budget_tokens: lowered },
    },
  }
}

/** Gemini's fit: `generationConfig.maxOutputTokens`, lowered or set. */
export function fitGeminiBudget(request: UpstreamRequest, budgetTokens: number): UpstreamRequest {
  const config = (request.body.generationConfig ?? {}) as Record<string, unknown>
  const current = config.maxOutputTokens
  const maxOutputTokens =
    typeof current === 'number' ? Math.min(current, budgetTokens) : budgetTokens
  return {
    url: request.url,
    body: { ...request.body, generationConfig: { ...config, maxOutputTokens } },
  }
}
