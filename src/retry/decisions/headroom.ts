/**
 * What a response's rate-limit headers say of its key's remaining budget: OpenAI's (and most
 * compatible providers') `x-ratelimit-remaining-{requests,tokens}` and
 * `x-ratelimit-reset-{requests,tokens}` (durations such as `6m0s`, `20ms`), and Anthropic's
 * `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}`
 * (RFC 3339 timestamps, read as milliseconds from now). Read from every response, success
 * and failure. A value that is malformed, negative or absurd is dropped, never thrown: a
 * lying header leaves that part of the headroom unknown.
 *
 * @module
 */

import type { KeyHeadroom } from '../../key-pool/types.js'
import { parseResetDuration, parseResetTimestamp } from './rate-limit-headers.js'

/** The most a budget can state: more is not a budget a provider gives (`1e300`, `Infinity`). */
const mostRemaining = 1e12

/** The longest reset a rate-limit budget states (daily limits): longer is read as a lie. */
const longestResetMs = 2 * 86_400_000

/** A non-negative count, written as digits (a fraction is floored). */
function countOf(value: string | null): number | undefined {
  if (value === null) return undefined
  const text = value.trim()
  if (!/^\d+(\.\d+)?$/.test(text)) return undefined
  const count = Math.floor(Number(text))
  return count <= mostRemaining ? count : undefined
}

function resetOf(ms: number | undefined): number | undefined {
  return ms !== undefined && ms >= 0 && ms <= longestResetMs ? ms : undefined
}

/** A budget as one limit states it. */
interface Budget {
  readonly remaining: number
  readonly resetMs: number | undefined
}

function budget(remaining: number | undefined, resetMs: number | undefined): Budget | undefined {
  return remaining === undefined ? undefined : { remaining, resetMs }
}

/** The response's rate-limit headers by name (lowercase). */
type Stated = Readonly<Record<string, string>>

function anthropicBudget(headers: Stated, limit: string, now: number): Budget | undefined {
  return budget(
    countOf(headers[`anthropic-ratelimit-${limit}-remaining`] ?? null),
    resetOf(parseResetTimestamp(headers[`anthropic-ratelimit-${limit}-reset`], now)),
  )
}

function openaiBudget(headers: Stated, limit: string): Budget | undefined {
  return budget(
    countOf(headers[`x-ratelimit-remaining-${limit}`] ?? null),
    resetOf(parseResetDuration(headers[`x-ratelimit-reset-${limit}`])),
  )
}

/**
 * The rate-limit headers of a response, in one pass (read on every attempt: a dozen
 * `Headers.get` calls cost several times one pass), or `undefined` when it has none.
 */
function statedLimits(headers: Headers): Stated | undefined {
  let stated: Record<string, string> | undefined
  headers.forEach((value, name) => {
    if (name.startsWith('x-ratelimit-') || name.startsWith('anthropic-ratelimit-')) {
      stated ??= Object.create(null) as Record<string, string>
      stated[name] = value
    }
  })
  return stated
}

/** The smaller of two budgets (the one that binds first). */
function smaller(a: Budget | undefined, b: Budget | undefined): Budget | undefined {
  if (a === undefined) return b
  if (b === undefined) return a
  return b.remaining < a.remaining ? b : a
}

/**
 * Anthropic's token budget: input and output summed when it splits them (full again when
 * both are), the smaller of that and the combined budget when it states both.
 */
function anthropicTokens(headers: Stated, now: number): Budget | undefined {
  const input = anthropicBudget(headers, 'input-tokens', now)
  const output = anthropicBudget(headers, 'output-tokens', now)
  const split =
    input !== undefined && output !== undefined
      ? {
          remaining: input.remaining + output.remaining,
          resetMs:
            input.resetMs === undefined || output.resetMs === undefined
              ? undefined
              : Math.max(input.resetMs, output.resetMs),
        }
      : (input ?? output)
  return smaller(anthropicBudget(headers, 'tokens', now), split)
}

/**
 * Reads a key's headroom from a response's headers, or `undefined` when they state none.
 * Never throws: every value is checked, and one that is malformed, negative or absurd (more
 * than 10^12 left, a reset more than two days away) is dropped. A reset in the past is `0`.
 * A reset stated without its remaining count says nothing of the budget and is dropped.
 *
 * @example
 * parseHeadroom(new Headers({ 'x-ratelimit-remaining-requests': '59', 'x-ratelimit-reset-requests': '1s' }))
 * // { requestsRemaining: 59, requestsResetMs: 1000 }
 */
export function parseHeadroom(
  response: Headers,
  now: number = Date.now(),
): KeyHeadroom | undefined {
  const headers = statedLimits(response)
  if (headers === undefined) return undefined
  const requests = smaller(
    openaiBudget(headers, 'requests'),
    anthropicBudget(headers, 'requests', now),
  )
  const tokens = smaller(openaiBudget(headers, 'tokens'), anthropicTokens(headers, now))
  if (requests === undefined && tokens === undefined) return undefined
  const headroom: { -readonly [K in keyof KeyHeadroom]: KeyHeadroom[K] } = {}
  if (requests !== undefined) {
    headroom.requestsRemaining = requests.remaining
    if (requests.resetMs !== undefined) headroom.requestsResetMs = requests.resetMs
  }
  if (tokens !== undefined) {
    headroom.tokensRemaining = tokens.remaining
    if (tokens.resetMs !== undefined) headroom.tokensResetMs = tokens.resetMs
  }
  return headroom
}

/**
 * Gives `outcome` the headroom `headers` state, when it is a success or a rate limit (the
 * outcomes that carry one) and they state any; any other outcome, or one that already carries
 * what these headers said, is returned as it is.
 */
export function withHeadroom<O extends { readonly kind: string }>(
  outcome: O,
  headers: Headers | undefined,
): O {
  if (headers === undefined) return outcome
  if (outcome.kind !== 'success' && outcome.kind !== 'rate-limited') return outcome
  // A rate limit judged from these headers already read them (classify).
  if ('headroom' in outcome) return outcome
  const headroom = parseHeadroom(headers)
  return headroom === undefined ? outcome : { ...outcome, headroom }
}
