/**
 * User code is hostile: guards around what a host hands the relay (an adapter, a per-frame
 * transform or translator), so that a throw or a garbage return surfaces as one
 * `UserCodeError` naming the component, and the relay's one net (`endAfterThrow`) can end
 * the request honestly. The shipped adapters are not wrapped: they pay nothing per frame.
 *
 * @module
 */

import { UserCodeError } from '../errors.js'
import { anthropicMessages } from '../protocols/anthropic-messages.js'
import { geminiGenerateContent } from '../protocols/gemini.js'
import { openaiChat } from '../protocols/openai-chat.js'
import { openaiResponses } from '../protocols/openai-responses.js'
import type { StreamAdapter } from '../protocols/types.js'

const shipped: ReadonlySet<StreamAdapter> = new Set([
  openaiChat,
  openaiResponses,
  anthropicMessages,
  geminiGenerateContent,
])

/** What a member must return, when it returns something the relay relies on. */
const returns: Readonly<Record<string, (value: unknown) => boolean>> = {
  inspect: (value) =>
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { kind?: unknown }).kind === 'string',
  renderError: (value) => value instanceof Uint8Array,
  renderStop: (value) => value instanceof Uint8Array,
  renderReasoningAsText: (value) => value instanceof Uint8Array,
  renderErrorBody: (value) => typeof value === 'string',
}

/** Every method name of `value`, its prototypes' included. */
function methodNames(value: object): string[] {
  const names = new Set<string>()
  for (
    let target: object | null = value;
    target !== null && target !== Object.prototype;
    target = Object.getPrototypeOf(target)
  ) {
    for (const name of Object.getOwnPropertyNames(target)) {
      if (name !== 'constructor' && typeof (value as Record<string, unknown>)[name] === 'function')
        names.add(name)
    }
  }
  return [...names]
}

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
  const out: Record<string, unknown> = { ...adapter }
  for (const name of methodNames(adapter)) {
    const method = (adapter as unknown as Record<string, (...args: unknown[]) => unknown>)[
      name
    ] as (...args: unknown[]) => unknown
    const check = returns[name]
    const component = `adapter.${name}`
    out[name] = (...args: unknown[]) => {
      let value: unknown
      try {
        value = method.apply(adapter, args)
      } catch (error) {
        throw new UserCodeError(component, error)
      }
      if (check !== undefined && !check(value)) {
        throw new UserCodeError(component, value, 'returned something that is not what it must')
      }
      return value
    }
  }
  const result = Object.freeze(out) as unknown as StreamAdapter
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
