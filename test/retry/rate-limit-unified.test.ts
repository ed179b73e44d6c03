import { describe, expect, it } from 'vitest'
import { classifyAttemptFailure } from '../../src/advanced.js'
import { errorFromBody } from '../../src/retry/decisions/error-body.js'
import {
  parseUnifiedRateLimit,
  rateLimitDelay,
  unifiedRateLimitMessage,
} from '../../src/retry/decisions/rate-limit-headers.js'

const now = Date.parse('2026-11-29T12:00:00Z')
const minute = 60_000
const hour = 60 * minute
const day = 24 * hour
/** A unified reset as Anthropic sends it: Unix seconds. */
const at = (ms: number, from = now) => String(Math.floor((from + ms) / 1000))

// Header sets shaped like recorded Anthropic 429s on subscription (OAuth) keys.
const fiveHourExhausted = (from = now) => ({
  'content-type': 'application/json',
  'retry-after': '2094',
  'anthropic-ratelimit-unified-status': 'rejected',
  'anthropic-ratelimit-unified-reset': at(4 * hour + 12 * minute, from),
  'anthropic-ratelimit-unified-representative-claim': 'five_hour',
  'anthropic-ratelimit-unified-5h-status': 'rejected',
  'anthropic-ratelimit-unified-5h-reset': at(4 * hour + 12 * minute, from),
  'anthropic-ratelimit-unified-5h-utilization': '1.0',
  'anthropic-ratelimit-unified-7d-status': 'allowed',
  'anthropic-ratelimit-unified-7d-reset': at(3 * day, from),
  'anthropic-ratelimit-unified-7d-utilization': '0.59',
  'anthropic-ratelimit-unified-fallback-percentage': '0.5',
  'anthropic-ratelimit-unified-overage-status': 'rejected',
  'anthropic-ratelimit-unified-overage-disabled-reason': 'out_of_credits',
})
const weeklyExhausted = {
  'anthropic-ratelimit-unified-status': 'rejected',
  'anthropic-ratelimit-unified-reset': at(2 * day + 5 * hour),
  'anthropic-ratelimit-unified-representative-claim': 'seven_day',
  'anthropic-ratelimit-unified-5h-status': 'allowed',
  'anthropic-ratelimit-unified-5h-reset': at(2 * hour),
  'anthropic-ratelimit-unified-5h-utilization': '0.12',
  'anthropic-ratelimit-unified-7d-status': 'rejected',
  'anthropic-ratelimit-unified-7d-reset': at(2 * day + 5 * hour),
  'anthropic-ratelimit-unified-7d-utilization': '1.01',
  'anthropic-ratelimit-unified-overage-status': 'rejected',
  'anthropic-ratelimit-unified-overage-disabled-reason': 'org_level_disabled',
}
// Weekly-with-overage exhausted: the window states no reset of its own, the top level does.
const overageIncludedExhausted = {
  'retry-after': '121180',
  'anthropic-ratelimit-unified-status': 'rejected',
  'anthropic-ratelimit-unified-reset': at(36 * hour),
  'anthropic-ratelimit-unified-representative-claim': 'seven_day_overage_included',
  'anthropic-ratelimit-unified-5h-utilization': '0.00',
  'anthropic-ratelimit-unified-7d-status': 'allowed',
  'anthropic-ratelimit-unified-7d-utilization': '0.69',
  'anthropic-ratelimit-unified-7d_oi-status': 'rejected',
  'anthropic-ratelimit-unified-7d_oi-utilization': '1.02',
  'anthropic-ratelimit-unified-overage-status': 'rejected',
  'anthropic-ratelimit-unified-overage-disabled-reason': 'org_spend_cap_reached',
}
const bothExhausted = {
  'anthropic-ratelimit-unified-status': 'rejected',
  'anthropic-ratelimit-unified-representative-claim': 'five_hour',
  'anthropic-ratelimit-unified-5h-status': 'rejected',
  'anthropic-ratelimit-unified-5h-reset': at(3 * hour),
  'anthropic-ratelimit-unified-7d-status': 'rejected',
  'anthropic-ratelimit-unified-7d-reset': at(6 * day + 1 * hour),
}
// A per-minute 429 on a key whose subscription windows are fine (only warned).
const warnedOnly = {
  'retry-after': '20',
  'anthropic-ratelimit-unified-status': 'allowed_warning',
  'anthropic-ratelimit-unified-representative-claim': 'five_hour',
  'anthropic-ratelimit-unified-5h-status': 'allowed_warning',
  'anthropic-ratelimit-unified-5h-reset': at(1 * hour),
  'anthropic-ratelimit-unified-5h-utilization': '0.91',
}
// Only the top level, with an RFC 3339 reset.
const topLevelOnly = {
  'anthropic-ratelimit-unified-status': 'rejected',
  'anthropic-ratelimit-unified-reset': '2026-11-29T16:30:00Z',
  'anthropic-ratelimit-unified-representative-claim': 'seven_day_opus',
}

describe("Anthropic's unified rate-limit headers", () => {
  it.each([
    ['5-hour exhausted', fiveHourExhausted(), 'rejected', '5h', '5-hour', 4 * hour + 12 * minute],
    ['weekly exhausted', weeklyExhausted, 'rejected', '7d', 'weekly', 2 * day + 5 * hour],
    [
      'weekly (overage included) exhausted',
      overageIncludedExhausted,
      'rejected',
      '7d_oi',
      'weekly (overage included)',
      36 * hour,
    ],
    ['5-hour and weekly exhausted', bothExhausted, 'rejected', '7d', 'weekly', 6 * day + hour],
    ['only warned', warnedOnly, 'allowed_warning', '5h', '5-hour', hour],
    ['top level only', topLevelOnly, 'rejected', '7d_opus', 'weekly Opus', 4 * hour + 30 * minute],
  ])('%s → %s, window %s (%s)', (_, headers, status, window, label, resetIn) => {
    expect(parseUnifiedRateLimit(new Headers(headers), now)).toMatchObject({
      status,
      window,
      label,
      resetAt: now + resetIn,
    })
  })

  it.each([
    // A short retry-after never undercuts an exhausted 5-hour or weekly window.
    ['5-hour exhausted', fiveHourExhausted(), 4 * hour + 12 * minute],
    ['weekly exhausted', weeklyExhausted, 2 * day + 5 * hour],
    ['weekly (overage included) exhausted', overageIncludedExhausted, 36 * hour],
    ['5-hour and weekly exhausted', bothExhausted, 6 * day + hour],
    ['top level only', topLevelOnly, 4 * hour + 30 * minute],
    // Not rejected: the ordinary headers decide.
    ['only warned', warnedOnly, 20_000],
  ])('rateLimitDelay: %s → the key waits %i ms', (_, headers, expected) => {
    expect(rateLimitDelay(new Headers(headers), now)).toBe(expected)
  })

  it('keeps a retry-after that is longer than the window reset', () => {
    const headers = new Headers({ ...fiveHourExhausted(), 'retry-after': String(5 * 3600) })
    expect(rateLimitDelay(headers, now)).toBe(5 * hour)
  })

  it('says which window is exhausted and when it resets', () => {
    expect(unifiedRateLimitMessage(new Headers(fiveHourExhausted()), now)).toBe(
      'the 5-hour usage limit is exhausted; it resets at 2026-11-29T16:12:00Z, in 4 h 12 min',
    )
    expect(unifiedRateLimitMessage(new Headers(weeklyExhausted), now)).toBe(
      'the weekly usage limit is exhausted; it resets at 2026-12-01T17:00:00Z, in 2 d 5 h',
    )
    expect(unifiedRateLimitMessage(new Headers(warnedOnly), now)).toBeUndefined()
    expect(unifiedRateLimitMessage(new Headers({ 'retry-after': '3' }), now)).toBeUndefined()
    expect(parseUnifiedRateLimit(new Headers({ 'retry-after': '3' }), now)).toBeUndefined()
  })

  it('a 429 from a key whose 5-hour quota is spent: cooled until the reset, and the client is told why', () => {
    const from = Date.now()
    const headers = new Headers(fiveHourExhausted(from))
    const body =
      '{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account\'s rate limit. Please try again later."}}'
    const verdict = classifyAttemptFailure({
      kind: 'status',
      status: 429,
      headers,
      error: errorFromBody(body, 429),
    })
    const wait = 4 * hour + 12 * minute
    expect(verdict).toMatchObject({ retryable: true, status: 429, key: { kind: 'rate-limited' } })
    const retryAfterMs = verdict.retryAfterMs as number
    expect(retryAfterMs).toBeGreaterThan(wait - 2000)
    expect(retryAfterMs).toBeLessThanOrEqual(wait)
    expect(verdict.key).toEqual({ kind: 'rate-limited', retryAfterMs })
    expect(verdict.error.type).toBe('rate_limit_error')
    expect(verdict.error.message).toMatch(
      /^This request would exceed your account's rate limit\. Please try again later\. \(the 5-hour usage limit is exhausted; it resets at \d{4}-\d\d-\d\dT[\d:]+Z, in 4 h 1[12] min\)$/,
    )
  })
})
