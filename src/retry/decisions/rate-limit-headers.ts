/**
 * When an upstream says a key may be used again: `retry-after-ms`, `retry-after` (seconds or
 * an HTTP date), OpenAI's `x-ratelimit-reset-*` durations (`6m0s`, `1s`, `20ms`),
 * Anthropic's `anthropic-ratelimit-*-reset` timestamps and its unified (subscription)
 * windows, `anthropic-ratelimit-unified-*` (5-hour, weekly, per-model weekly, overage).
 * Malformed values are ignored; a date in the past means "now"; a wait longer than a century
 * (`retry-after-ms: 1e12` is 31 years) is read as a century, so the pool caps it at
 * `maxCooldownMs` rather than ignoring it.
 *
 * @module
 */

/** The longest wait a header can state; longer ones are read as this (still a finite date). */
const longestWaitMs = 100 * 365 * 86_400_000

/** A non-negative decimal, with an exponent if written so (`20`, `1.5`, `1e12`). */
const decimal = /^\d+(\.\d+)?(e[+-]?\d+)?$/i

/** `text` times `unit` as whole milliseconds, at most {@link longestWaitMs}; `undefined` if not a decimal. */
function waitOf(text: string, unit: number): number | undefined {
  if (!decimal.test(text)) return undefined
  return Math.round(Math.min(Number(text) * unit, longestWaitMs))
}

/**
 * Parses `retry-after`: whole or fractional seconds, or an HTTP date. Milliseconds, or `undefined`.
 *
 * @group Retry decisions
 */
export function parseRetryAfter(
  value: string | null | undefined,
  now: number = Date.now(),
): number | undefined {
  if (value == null) return undefined
  const text = value.trim()
  const seconds = waitOf(text, 1000)
  if (seconds !== undefined) return seconds
  if (!/[a-z]/i.test(text)) return undefined
  const date = Date.parse(text)
  if (Number.isNaN(date)) return undefined
  return Math.min(Math.max(0, date - now), longestWaitMs)
}

/**
 * Parses `retry-after-ms`.
 * @internal exported for tests
 */
export function parseRetryAfterMs(value: string | null | undefined): number | undefined {
  if (value == null) return undefined
  return waitOf(value.trim(), 1)
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
  return Math.round(Math.min(total, longestWaitMs))
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
  return Math.min(Math.max(0, date - now), longestWaitMs)
}

const openaiLimits = ['requests', 'tokens'] as const
const anthropicLimits = ['requests', 'tokens', 'input-tokens', 'output-tokens'] as const

/**
 * How long to wait before a rate-limited key is usable again, from a response's headers, or
 * `undefined` when they say nothing usable. `retry-after-ms` wins, then `retry-after`; else
 * the latest reset among the limits reported as exhausted (remaining `0`), or the earliest
 * reset when none says which. When Anthropic's unified status is `rejected`, the key waits
 * at least until the exhausted window resets: a key that spent its 5-hour or weekly quota
 * is not tried again after a short `retry-after`.
 *
 * @example
 * rateLimitDelay(new Headers({ 'retry-after': '20' })) // 20_000
 * rateLimitDelay(new Headers({ 'x-ratelimit-reset-requests': '6m0s', 'x-ratelimit-remaining-requests': '0' })) // 360_000
 */
export function rateLimitDelay(headers: Headers, now: number = Date.now()): number | undefined {
  const stated = statedDelay(headers, now)
  const unified = parseUnifiedRateLimit(headers, now)
  if (unified?.status !== 'rejected' || unified.resetAt === undefined) return stated
  return Math.max(stated ?? 0, unified.resetAt - now, 0)
}

function statedDelay(headers: Headers, now: number): number | undefined {
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

/** Anthropic's unified (subscription) rate limit, read from `anthropic-ratelimit-unified-*`. */
interface UnifiedRateLimit {
  /** `allowed`, `allowed_warning` or `rejected` (`rejected` when any window is). */
  readonly status: string
  /**
   * The window that binds: the exhausted one when rejected (the latest to reset when several
   * are), else the representative claim's. `5h`, `7d`, `7d_opus`, `7d_sonnet`, `7d_oi`
   * (weekly with overage included), `overage`, or a window this library does not know.
   */
  readonly window: string | undefined
  /** A person's name for the window: `5-hour`, `weekly`, `weekly Opus`… */
  readonly label: string | undefined
  /** Epoch milliseconds when the binding window resets, if stated. */
  readonly resetAt: number | undefined
  /** Share of the window used (`0.42`), if stated. */
  readonly utilization: number | undefined
}

const unifiedPrefix = 'anthropic-ratelimit-unified-'

/** Representative-claim words and the window header each one names. */
const claimWindows: Readonly<Record<string, string>> = {
  five_hour: '5h',
  seven_day: '7d',
  seven_day_opus: '7d_opus',
  seven_day_sonnet: '7d_sonnet',
  seven_day_overage_included: '7d_oi',
  overage: 'overage',
}

const windowLabels: Readonly<Record<string, string>> = {
  '5h': '5-hour',
  '7d': 'weekly',
  '7d_opus': 'weekly Opus',
  '7d_sonnet': 'weekly Sonnet',
  '7d_oi': 'weekly (overage included)',
  overage: 'overage (extra usage)',
}

/** A unified reset: Unix seconds (what Anthropic sends), or an RFC 3339 date. Epoch ms. */
function parseUnifiedReset(value: string | null, now: number): number | undefined {
  if (value === null) return undefined
  const text = value.trim()
  const date = decimal.test(text) ? Number(text) * 1000 : Date.parse(text)
  return Number.isNaN(date) ? undefined : Math.round(Math.min(date, now + longestWaitMs))
}

function parseShare(value: string | null): number | undefined {
  if (value === null || !/^\d+(\.\d+)?$/.test(value.trim())) return undefined
  return Number(value)
}

interface UnifiedWindow {
  readonly window: string
  readonly status: string | undefined
  readonly resetAt: number | undefined
  readonly utilization: number | undefined
}

function unifiedWindow(headers: Headers, window: string, now: number): UnifiedWindow {
  return {
    window,
    status: headers.get(`${unifiedPrefix}${window}-status`)?.trim() ?? undefined,
    resetAt: parseUnifiedReset(headers.get(`${unifiedPrefix}${window}-reset`), now),
    utilization: parseShare(headers.get(`${unifiedPrefix}${window}-utilization`)),
  }
}

/**
 * Reads Anthropic's unified rate-limit headers (`anthropic-ratelimit-unified-status`,
 * `-reset`, `-representative-claim`, and per window `-5h-status`, `-5h-reset`,
 * `-5h-utilization`, likewise `-7d-*`, `-7d_opus-*`, `-7d_sonnet-*`, `-7d_oi-*`,
 * `-overage-*`). Resets are Unix seconds. `undefined` when none is present.
 *
 * @example
 * parseUnifiedRateLimit(new Headers({
 *   'anthropic-ratelimit-unified-status': 'rejected',
 *   'anthropic-ratelimit-unified-5h-status': 'rejected',
 *   'anthropic-ratelimit-unified-5h-reset': '1795953600',
 * }))
 * // { status: 'rejected', window: '5h', label: '5-hour', resetAt: 1795953600000, … }
 * @internal exported for tests
 */
export function parseUnifiedRateLimit(
  headers: Headers,
  now: number = Date.now(),
): UnifiedRateLimit | undefined {
  const names = new Set<string>()
  headers.forEach((_, name) => {
    const match = /^anthropic-ratelimit-unified-(.+)-(?:status|reset|utilization)$/.exec(name)
    if (match?.[1] !== undefined) names.add(match[1])
  })
  const topStatus = headers.get(`${unifiedPrefix}status`)?.trim()
  const claim = headers.get(`${unifiedPrefix}representative-claim`)?.trim()
  if (names.size === 0 && topStatus === undefined && claim === undefined) return undefined
  const windows = [...names].map((name) => unifiedWindow(headers, name, now))
  // Overage spends money past a window; only a standard window being exhausted blocks a key.
  const exhausted = windows.filter((w) => w.status === 'rejected' && w.window !== 'overage')
  const claimed = claim === undefined ? undefined : (claimWindows[claim] ?? claim)
  const latest = exhausted.reduce<UnifiedWindow | undefined>(
    (best, w) => (best === undefined || (w.resetAt ?? now) > (best.resetAt ?? now) ? w : best),
    undefined,
  )
  const binding = latest ?? windows.find((w) => w.window === claimed)
  const window = binding?.window ?? claimed
  return {
    // The top-level status decides: overage may still admit requests past an exhausted window.
    status: topStatus ?? (exhausted.length > 0 ? 'rejected' : (binding?.status ?? 'allowed')),
    window,
    label: window === undefined ? undefined : (windowLabels[window] ?? window),
    resetAt: binding?.resetAt ?? parseUnifiedReset(headers.get(`${unifiedPrefix}reset`), now),
    utilization: binding?.utilization,
  }
}

/** A wait as a person reads it: `45 s`, `12 min`, `4 h 12 min`, `3 d 4 h`. */
function formatWait(ms: number): string {
  const minutes = Math.ceil(ms / 60_000)
  if (ms < 60_000) return `${Math.max(0, Math.ceil(ms / 1000))} s`
  if (minutes < 60) return `${minutes} min`
  const hours = Math.floor(minutes / 60)
  if (hours < 24) return minutes % 60 === 0 ? `${hours} h` : `${hours} h ${minutes % 60} min`
  const days = Math.floor(hours / 24)
  return hours % 24 === 0 ? `${days} d` : `${days} d ${hours % 24} h`
}

/**
 * What a rejected unified rate limit means, for an error message: which window is exhausted
 * and when it resets, or `undefined` when the headers state no rejected unified limit.
 *
 * @example
 * unifiedRateLimitMessage(headers, now)
 * // 'the 5-hour usage limit is exhausted; it resets at 2026-11-29T17:00:00Z, in 5 h'
 */
export function unifiedRateLimitMessage(
  headers: Headers,
  now: number = Date.now(),
): string | undefined {
  const unified = parseUnifiedRateLimit(headers, now)
  if (unified?.status !== 'rejected') return undefined
  const limit = unified.label === undefined ? 'the usage limit' : `the ${unified.label} usage limit`
  if (unified.resetAt === undefined) return `${limit} is exhausted`
  const at = new Date(unified.resetAt).toISOString().replace('.000Z', 'Z')
  return `${limit} is exhausted; it resets at ${at}, in ${formatWait(unified.resetAt - now)}`
}
