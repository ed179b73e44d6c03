/**
 * The built-in request adjustment: when the upstream refuses a request because input plus
 * `max_tokens` exceeds the model's context window and says the numbers, lower the output
 * budget to fit and try once more. Pure functions.
 *
 * @module
 */

import type { UpstreamRequest } from '../protocols/types.js'

/** Options of the context-window fit. */
export interface ContextWindowFitOptions {
  /**
   * Tokens left free below the limit, for tokenizer slack.
   * @default 1024
   */
  readonly marginTokens?: number
  /**
   * The smallest output budget worth retrying with; below it, the original error stands.
   * @default 3000
   */
  readonly floorTokens?: number
}

/** Defaults of {@link ContextWindowFitOptions}. */
export const contextWindowFitDefaults = Object.freeze({ marginTokens: 1024, floorTokens: 3000 })

/** The numbers an overflow error states. */
export interface ContextOverflow {
  readonly inputTokens: number
  readonly limitTokens: number
}

/**
 * Reads an overflow error: Anthropic's `input length and max_tokens exceed context limit:
 * X + Y > Z`, or OpenAI's `maximum context length is Z tokens … requested T tokens (X in the
 * messages, Y in the completion)`. `undefined` when the message states no usable numbers.
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

const outputFields: Readonly<Record<string, readonly string[]>> = {
  'openai-chat': ['max_completion_tokens', 'max_tokens'],
  'openai-responses': ['max_output_tokens'],
  'anthropic-messages': ['max_tokens'],
}

/**
 * A request whose output budget fits the window the error describes, or `undefined` when it
 * cannot fit above the floor (or the error states no numbers). Lowers the protocol's field
 * (`max_tokens`, `max_completion_tokens`, `max_output_tokens`, Gemini's
 * `generationConfig.maxOutputTokens`), setting it if the request had none.
 *
 * @example
 * fitContextWindow('anthropic-messages', request,
 *   'input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000', {})
 * // → max_tokens: 10736
 */
export function fitContextWindow(
  protocol: string,
  request: UpstreamRequest,
  message: string,
  options: ContextWindowFitOptions = {},
): UpstreamRequest | undefined {
  const overflow = parseContextOverflow(message)
  if (overflow === undefined) return undefined
  const margin = options.marginTokens ?? contextWindowFitDefaults.marginTokens
  const floor = options.floorTokens ?? contextWindowFitDefaults.floorTokens
  const budget = overflow.limitTokens - overflow.inputTokens - margin
  if (budget < floor) return undefined
  if (protocol === 'gemini') {
    const config = (request.body.generationConfig ?? {}) as Record<string, unknown>
    return {
      url: request.url,
      body: { ...request.body, generationConfig: { ...config, maxOutputTokens: budget } },
    }
  }
  const fields = outputFields[protocol] ?? ['max_tokens']
  const present = fields.filter((name) => typeof request.body[name] === 'number')
  const body: Record<string, unknown> = { ...request.body }
  for (const name of present.length > 0 ? present : fields.slice(0, 1)) {
    const current = body[name]
    body[name] = typeof current === 'number' ? Math.min(current, budget) : budget
  }
  return { url: request.url, body }
}
