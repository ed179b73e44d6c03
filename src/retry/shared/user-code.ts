/**
 * User code is hostile: guards around what a host hands the relay (an adapter, a per-frame
 * transform or translator), so that a throw or a garbage return surfaces as one
 * `UserCodeError` naming the component, and the relay's one net (`endAfterThrow`) can end
 * the request honestly. The shipped adapters are not wrapped: they pay nothing per frame.
 *
 * @module
 */

import { UserCodeError } from '../../errors.js'
import { adapterReturns, guardMethods } from '../../guard-methods.js'
import { anthropicMessages } from '../../protocols/anthropic-messages.js'
import { geminiGenerateContent } from '../../protocols/gemini.js'
import { openaiChat } from '../../protocols/openai-chat.js'
import { openaiResponses } from '../../protocols/openai-responses.js'
import type { StreamAdapter } from '../../protocols/types.js'

const shipped: ReadonlySet<StreamAdapter> = new Set([
  openaiChat,
  openaiResponses,
  anthropicMessages,
  geminiGenerateContent,
])

const guarded = new WeakMap<StreamAdapter, StreamAdapter>()

/**
 * The adapter with every method guarded: a throw, or a return of the wrong kind from
 * `inspect` or a renderer, becomes a {@link UserCodeError} naming `adapter.<method>`. The
 * same adapter always gets the same guarded object (the relay compares adapters); a shipped
 * one is returned as it is.
 */
export function guardAdapter(adapter: StreamAdapter): StreamAdapter
export function guardAdapter(adapter: StreamAdapter | undefined): StreamAdapter | undefined
export function guardAdapter(adapter: StreamAdapter | undefined): StreamAdapter | undefined {
  if (adapter === undefined || shipped.has(adapter)) return adapter
  const known = guarded.get(adapter)
  if (known !== undefined) return known
  const result = guardMethods(
    adapter,
    'adapter',
    (component, cause, what) => new UserCodeError(component, cause, what),
    adapterReturns,
  )
  guarded.set(adapter, result)
  guarded.set(result, result)
  return result
}

/** A transform guarded like an adapter's methods: a throw names `component`. */
export function guardFunction<A extends unknown[], R>(
  component: string,
  fn: ((...args: A) => R) | undefined,
): ((...args: A) => R) | undefined {
  if (fn === undefined) return undefined
  return (...args: A) => {
    try {
      return fn(...args)
    } catch (error) {
      throw new UserCodeError(component, error)
    }
  }
}
