/**
 * The give-up table (which status and error type a client gets for each kind of failure)
 * and the verdicts of the key pool's answers (every key busy, rate limited, cooling,
 * rejected, none).
 *
 * @module
 */

import type { FailureReason, FailureVerdict } from '../shared/verdict.js'

/** Every way the library gives up on a request before content was committed. */
type GiveUpKind =
  | 'timeout'
  | 'upstream-fault'
  | 'overloaded'
  | 'busy'
  | 'rate-limited'
  | 'cooling'
  | 'credentials-rejected'
  | 'no-key'
  | 'client-request'
  | 'client-gone'
  | 'unsendable-body'
  | 'not-sent'

/** The answer for one way of giving up. */
interface GiveUpRule {
  /** The status the client gets. */
  readonly status: number
  /** The error type rendered in the client's protocol. */
  readonly errorType: string
}

/** The give-up table's type: `client-request` passes the upstream's status and error through. */
type GiveUpTable = Readonly<Record<Exclude<GiveUpKind, 'client-request'>, GiveUpRule>> & {
  readonly 'client-request': {
    readonly status: 'upstream'
    readonly errorType: 'upstream'
  }
}

/**
 * The give-up status table: which status and error type the client gets for each way the
 * library gives up. Verdicts built here and by {@link classifyAttemptFailure} follow it.
 *
 * | kind | status | why |
 * | --- | --- | --- |
 * | `timeout` | 504 | no data or no output in time, the deadline, the fallback's timeout |
 * | `upstream-fault` | 502 | 5xx, connection failures, empty or malformed streams, a 2xx that is not an event stream (an upstream 503/504 passes through) |
 * | `overloaded` | 529 | the provider is at capacity (529, `overloaded_error`) |
 * | `busy` | 503 + `Retry-After` | every key is at its in-flight cap (not rate limited) |
 * | `rate-limited` | 429 + `Retry-After` | every key cools down on an upstream rate-limit signal |
 * | `cooling` | 503 + `Retry-After` | every key cools down after failures (open circuits, auth holds) |
 * | `credentials-rejected` | 502 | the upstream rejected the gateway's credentials (never shown as the client's auth error) |
 * | `no-key` | 503 | no key is configured or enabled |
 * | `client-request` | the upstream's | the upstream refused the request itself (400, 404, 422…) |
 * | `client-gone` | 499 | the client aborted; nothing is written |
 * | `unsendable-body` | 400 | the request body cannot be serialised as JSON; nothing was sent |
 * | `not-sent` | 500 | the gateway could not build the request (URL, headers) or its attempt threw before sending |
 */
export const giveUpStatus: GiveUpTable = Object.freeze({
  timeout: { status: 504, errorType: 'timeout' },
  'upstream-fault': { status: 502, errorType: 'upstream_error' },
  overloaded: { status: 529, errorType: 'overloaded_error' },
  busy: { status: 503, errorType: 'service_unavailable' },
  'rate-limited': { status: 429, errorType: 'rate_limit_error' },
  cooling: { status: 503, errorType: 'service_unavailable' },
  'credentials-rejected': { status: 502, errorType: 'upstream_error' },
  'no-key': { status: 503, errorType: 'service_unavailable' },
  'client-request': { status: 'upstream', errorType: 'upstream' },
  'client-gone': { status: 499, errorType: 'client_closed' },
  'unsendable-body': { status: 400, errorType: 'invalid_request_error' },
  'not-sent': { status: 500, errorType: 'internal_error' },
} as const)

/**
 * The `code` of an error saying the upstream rejected the gateway's credentials.
 */
export const credentialsRejectedCode = 'upstream_credentials_rejected'

/** Whole seconds to wait, at least 1 (a `Retry-After` of 0 invites a hot loop). */
function waitSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}

/** A verdict for a pool-level answer: no key was leased, so nothing is reported against one. */
function poolVerdict(
  kind: 'busy' | 'rate-limited' | 'cooling' | 'credentials-rejected' | 'no-key',
  reason: FailureReason,
  message: string,
  retryAfterMs?: number,
  code?: string,
): FailureVerdict {
  const rule = giveUpStatus[kind]
  return {
    retryable: false,
    key: { kind: 'cancelled' },
    reason,
    overload: kind === 'rate-limited',
    status: rule.status,
    error: {
      type: rule.errorType,
      message,
      status: rule.status,
      ...(code === undefined ? {} : { code }),
    },
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
  }
}

/**
 * Every key is at its in-flight cap: 503 with `Retry-After` (when the earliest cooling key is
 * usable, else 1 s: a release may free a key at any time). Not a rate limit (guarantee 13 in docs/guarantees.md).
 *
 * @example
 * busyVerdict(undefined) // { status: 503, retryAfterMs: 1000, reason: 'all-keys-busy', … }
 */
export function busyVerdict(retryInMs: number | undefined): FailureVerdict {
  const ms = retryInMs ?? 1000
  return poolVerdict(
    'busy',
    'all-keys-busy',
    `every upstream key is busy (at its concurrency limit); retry in ${waitSeconds(ms)} s`,
    ms,
  )
}

/**
 * Every key cools down on an upstream rate-limit signal: 429 with `Retry-After`.
 *
 * @example
 * rateLimitedVerdict(20_000) // { status: 429, retryAfterMs: 20000, reason: 'all-keys-rate-limited', … }
 */
export function rateLimitedVerdict(retryInMs: number): FailureVerdict {
  return poolVerdict(
    'rate-limited',
    'all-keys-rate-limited',
    `every upstream key is rate limited; retry in ${waitSeconds(retryInMs)} s`,
    retryInMs,
  )
}

/**
 * Every key cools down, but not (only) on rate limits: open circuits after upstream failures,
 * auth holds. 503 with `Retry-After`; never called a rate limit (guarantee 13 in docs/guarantees.md).
 */
export function coolingVerdict(retryInMs: number): FailureVerdict {
  return poolVerdict(
    'cooling',
    'all-keys-cooling',
    `every upstream key is cooling down after upstream failures; retry in ${waitSeconds(retryInMs)} s`,
    retryInMs,
  )
}

const maxListedKeys = 10

/**
 * The upstream rejected the gateway's credentials for every key: 502 with code
 * `upstream_credentials_rejected`, naming the key ids (never a secret). The client's own
 * request was fine, so it never sees a 401/403.
 *
 * @example
 * credentialsRejectedVerdict(['key-a', 'key-b']).error.message
 * // "the upstream rejected the gateway's credentials for every key (key-a, key-b)"
 */
export function credentialsRejectedVerdict(keyIds: readonly string[]): FailureVerdict {
  const listed = keyIds.slice(0, maxListedKeys).join(', ')
  const more = keyIds.length > maxListedKeys ? ` and ${keyIds.length - maxListedKeys} more` : ''
  const ids = keyIds.length === 0 ? '' : ` (${listed}${more})`
  return poolVerdict(
    'credentials-rejected',
    'all-keys-rejected',
    `the upstream rejected the gateway's credentials for every key${ids}`,
    undefined,
    credentialsRejectedCode,
  )
}

/** No key is configured or enabled: 503. */
export function noKeyVerdict(reason: 'no-keys' | 'all-disabled' | 'all-excluded'): FailureVerdict {
  return poolVerdict(
    'no-key',
    `no-key:${reason}`,
    reason === 'no-keys'
      ? 'no upstream key is configured'
      : 'no upstream key is enabled: every key is disabled',
  )
}
