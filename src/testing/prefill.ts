/**
 * How the faulty upstream continues a prefilled answer, as servers that allow it do: a
 * request whose final assistant message is a prefix of the scripted answer is answered with
 * the rest of it (Anthropic's prefill; DeepSeek's and Mistral's `prefix: true`, vLLM's
 * `continue_final_message`).
 *
 * @module
 */

import { anthropicMessages } from '../protocols/anthropic-messages.js'
import type { StreamAdapter } from '../protocols/types.js'

/** A message's text: a string, or its text blocks joined; `undefined` for anything else. */
function textOf(content: unknown): string | undefined {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return undefined
  const blocks = content as { type?: unknown; text?: unknown }[]
  if (!blocks.every((block) => block?.type === 'text' && typeof block.text === 'string')) {
    return undefined
  }
  return blocks.map((block) => block.text).join('')
}

/** The text a request asks to continue, in its protocol's dialect; `undefined` for none. */
export function prefillOf(adapter: StreamAdapter, body: string): string | undefined {
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return undefined
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined
  const { messages, continue_final_message: continues } = parsed as Record<string, unknown>
  if (!Array.isArray(messages) || messages.length === 0) return undefined
  const last = messages[messages.length - 1] as Record<string, unknown> | null
  if (typeof last !== 'object' || last === null || last.role !== 'assistant') return undefined
  // Anthropic continues any final assistant message; the Chat dialects only when asked to.
  const asked = adapter === anthropicMessages || last.prefix === true || continues === true
  return asked ? textOf(last.content) : undefined
}

/**
 * The rest of the scripted answer a prefilled request began, if it is one: `answer` as any
 * attempt up to `attempt` tagged it (`0`: untagged, no chaos marker).
 */
export function continuationRest(
  adapter: StreamAdapter,
  body: string,
  answer: string,
  attempt: number,
): string | undefined {
  const prefill = prefillOf(adapter, body)
  if (prefill === undefined) return undefined
  const answers =
    attempt === 0
      ? [answer]
      : Array.from({ length: attempt }, (_, k) => `[attempt ${k + 1}] ${answer}`)
  return restAfter(prefill, answers)
}

/**
 * The rest of the answer `prefill` began: the first of `answers` it is a prefix of, after
 * it; `undefined` when it begins none of them.
 * @internal exported for tests
 */
export function restAfter(prefill: string, answers: readonly string[]): string | undefined {
  const answer = answers.find((each) => each.startsWith(prefill))
  return answer?.slice(prefill.length)
}
