/**
 * Which upstream models refuse a prefill: newer models answer a continuation request with
 * `400 invalid_request_error: "This model does not support assistant message prefill"`.
 * The relay remembers it per route, URL and model, so a later cut there is told at once
 * instead of paying a request that is refused again. The memory is the process's, shared by
 * every relay in it; it is bounded (the oldest entry goes first) and each entry expires (a
 * model alias may move, a gateway may route elsewhere). Nothing here holds a timer.
 *
 * @module
 */

import { now } from '../../call-safely.js'
import type { UpstreamErrorInfo, UpstreamRequest } from '../../protocols/types.js'

/**
 * The bounds of the memory: at most `maxEntries` routes and models, each remembered for
 * `ttlMs` after the refusal.
 * @internal exported for tests
 */
export const prefillRefusalMemory = Object.freeze({ maxEntries: 1024, ttlMs: 3_600_000 })

/** When each remembered refusal expires, oldest first (a `Map` keeps insertion order). */
const refused = new Map<string, number>()

/** The memory's key of a continuation request on a route. */
export function refusalKey(route: string, request: UpstreamRequest): string {
  const model = request.body.model
  return JSON.stringify([route, request.url ?? '', typeof model === 'string' ? model : ''])
}

/** Whether the upstream refused a prefill for `key` within the last `ttlMs`. */
export function prefillRefused(key: string, at: number = now()): boolean {
  const until = refused.get(key)
  if (until === undefined) return false
  if (at < until) return true
  refused.delete(key)
  return false
}

/** Remembers a refusal for `key` (again at the end: the newest), dropping the oldest past the bound. */
export function rememberPrefillRefusal(key: string, at: number = now()): void {
  refused.delete(key)
  refused.set(key, at + prefillRefusalMemory.ttlMs)
  for (const oldest of refused.keys()) {
    if (refused.size <= prefillRefusalMemory.maxEntries) break
    refused.delete(oldest)
  }
}

/**
 * Forgets every refusal.
 * @internal exported for tests
 */
export function forgetPrefillRefusals(): void {
  refused.clear()
}

/**
 * Whether a continuation request's error answer says the model refuses a prefill (as
 * Anthropic words it; vLLM names its `continue_final_message`): a 400 that names it.
 */
export function isPrefillRefusal(status: number, error: UpstreamErrorInfo | undefined): boolean {
  if (status !== 400 || error === undefined) return false
  return /prefill|continue_final_message/i.test(error.message)
}
