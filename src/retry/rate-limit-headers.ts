/**
 * When an upstream says a key may be used again: `retry-after-ms`, `retry-after` (seconds or
 * an HTTP date), OpenAI's `x-ratelimit-reset-*` durations (`6m0s`, `1s`, `20ms`) and
 * Anthropic's `anthropic-ratelimit-*-reset` timestamps. Malformed values are ignored; a
 * date in the past means "now".
 *
 * @module
 */

/** Parses `retry-after`: whole or fractional seconds, or an HTTP date. Milliseconds, or `undefined`. */
export function parseRetryAfter(
  value: string | null | undefined,
  now: number = Date.now(),
): number | undefined {
  if (value == null) return undefined
  const text = value.trim()
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000)
  if (!/[a-z]/i.test(text)) return undefined
  const date = Date.parse(text)
  if (Number.isNaN(date)) return undefined
  return Math.max(0, date - now)
}

/**
 * Parses `retry-after-ms`.
 * @internal exported for tests
 */
export function parseRetryAfterMs(value: string | null | undefined): number | undefined {
  if (value == null) return undefined
  const text = value.trim()
  if (!/^\d+(\.\d+)?$/.test(text)) return undefined
  return Math.round(Number(text))
}

const durationUnits: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 }

/**
 * Parses an OpenAI reset duration such as `6m0s`, `1s`, `20ms`, `1h2m3.5s`.
 * @internal exported for tests
 */
export function parseResetDuration(value: string | null | undefined): number | undefined {
  if (value == null) return undefined
  const text = value.trim()
  if (text === '' || !/^(\d+(\.\d+)?(h|ms|m|s))+$/.test(text)) return undefined
  let total = 0
  for (const match of text.matchAll(/(\d+(?:\.\d+)?)(h|ms|m|s)/g)) {
    total += Number(match[1]) * (durationUnits[match[2] as string] as number)
  }
  return Math.round(total)
}

/**
 * Parses an RFC 3339 reset timestamp (Anthropic) into milliseconds from `now`.
 * @internal exported for tests
 */
export function parseResetTimestamp(
  value: string | null | undefined,
  now: number = Date.now(),
): number | undefined {
  if (value == null) return undefined
  const date = Date.parse(value.trim())
  if (Number.isNaN(date)) return undefined
  return Math.max(0, date - now)
}

const openaiLimits = ['requests', 'tokens'] as const
const anthropicLimits = ['requests', 'tokens', 'input-tokens', 'output-tokens'] as const

/**
 * How long to wait before a rate-limited key is usable again, from a response's headers, or
 * `undefined` when they say nothing usable. `retry-after-ms` wins, then `retry-after`; else
 * the latest reset among the limits reported as exhausted (remaining `0`), or the earliest
 * reset when none says which.
 *
 * @example
 * rateLimitDelay(new Headers({ 'retry-after': '20' })) // 20_000
 * rateLimitDelay(new Headers({ 'x-ratelimit-reset-requests': '6m0s', 'x-ratelimit-remaining-requests': '0' })) // 360_000
 */
export function rateLimitDelay(headers: Headers, now: number = Date.now()): number | undefined {
  const ms = parseRetryAfterMs(headers.get('retry-after-ms'))
  if (ms !== undefined) return ms
  const after = parseRetryAfter(headers.get('retry-after'), now)
  if (after !== undefined) return after
  const exhausted: number[] = []
  const any: number[] = []
  const consider = (reset: number | undefined, remaining: string | null) => {
    if (reset === undefined) return
    any.push(reset)
    if (remaining !== null && Number(remaining) <= 0) exhausted.push(reset)
  }
  for (const limit of openaiLimits) {
    consider(
      parseResetDuration(headers.get(`x-ratelimit-reset-${limit}`)),
      headers.get(`x-ratelimit-remaining-${limit}`),
    )
  }
  for (const limit of anthropicLimits) {
    consider(
      parseResetTimestamp(headers.get(`anthropic-ratelimit-${limit}-reset`), now),
      headers.get(`anthropic-ratelimit-${limit}-remaining`),
    )
  }
  if (exhausted.length > 0) return Math.max(...exhausted)
  if (any.length > 0) return Math.min(...any)
  return undefined
}
