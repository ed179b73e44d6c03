/**
 * Classifying a failed attempt: what it says about the key, whether another attempt may
 * succeed, and what the client should hear if none does (`classifyAttemptFailure`).
 *
 * @module
 */

import type { RequestNotSentStep } from '../../errors.js'
import type { PeekOutcome } from '../../peek/index.js'
import { sanitizeMessage } from '../../protocols/sanitize.js'
import type { RenderableError, UpstreamErrorInfo } from '../../protocols/types.js'
import type { AttemptFailure, FailureVerdict } from '../shared/verdict.js'
import { classifyConnectionError, notSentStep, staleConnectionCodes } from './connection-errors.js'
import { errorTypeForStatus } from './error-body.js'
import { parseHeadroom } from './headroom.js'
import { credentialsRejectedCode, giveUpStatus } from './pool-verdicts.js'
import { rateLimitDelay, unifiedRateLimitMessage } from './rate-limit-headers.js'

function shouldRetryHeader(headers: Headers): boolean | undefined {
  const value = headers.get('x-should-retry')
  if (value === 'true') return true
  if (value === 'false') return false
  return undefined
}

function statusError(
  status: number,
  error: UpstreamErrorInfo | undefined,
  fallback: string,
): RenderableError {
  return error === undefined
    ? { type: errorTypeForStatus(status), message: fallback, status }
    : { type: error.type, message: error.message, code: error.code, status }
}

/**
 * A redirect (or a browser's opaque one, status 0): never followed with credentials, never
 * passed to the client as if it were the client's answer. Another attempt would be sent the
 * same way, so it is not retried; the message names the status and the target's origin only.
 */
function fromRedirect(status: number, location: string | null): FailureVerdict {
  let target = 'a location it did not state'
  if (location !== null) {
    try {
      target = new URL(location).origin
    } catch {
      target = 'a path on the same origin'
    }
  }
  const code = status === 0 ? 'a redirect' : String(status)
  const rule = giveUpStatus['upstream-fault']
  return {
    retryable: false,
    key: { kind: 'protocol-fault' },
    reason: `redirect-${status}`,
    overload: false,
    status: rule.status,
    error: {
      type: rule.errorType,
      message: `the upstream answered ${code} redirecting to ${target}; credentials are never sent on a redirect, so it was not followed: check the base URL`,
      status: rule.status,
    },
  }
}

function fromStatus(failure: Extract<AttemptFailure, { kind: 'status' }>): FailureVerdict {
  const { status, headers, error } = failure
  if (status < 200 || (status >= 300 && status < 400)) {
    return fromRedirect(status, headers.get('location'))
  }
  const override = shouldRetryHeader(headers)
  const message = error?.message ?? `the upstream answered ${status}`
  const base = {
    reason: `status-${status}` as const,
    error: statusError(status, error, message),
  }
  const verdict = ((): FailureVerdict => {
    if (status === 429) {
      const retryAfterMs = rateLimitDelay(headers)
      const headroom = parseHeadroom(headers)
      const window = unifiedRateLimitMessage(headers)
      return {
        ...base,
        ...(window === undefined
          ? {}
          : { error: { ...base.error, message: `${base.error.message} (${window})` } }),
        retryable: true,
        key: {
          kind: 'rate-limited',
          retryAfterMs,
          ...(headroom === undefined ? {} : { headroom }),
        },
        overload: true,
        status: 429,
        retryAfterMs,
      }
    }
    // A 4xx whose error says the provider is at capacity (some hosts and proxies answer 400
    // or 403 with Anthropic's `overloaded_error`) is retried on the error type, like a 529.
    const overloadedBody = status < 500 && error !== undefined && isOverloaded(error)
    if (status === 529 || overloadedBody)
      return { ...base, retryable: true, key: { kind: 'overloaded' }, overload: true, status: 529 }
    if (status === 401 || status === 403) {
      // Another key may work: the client gets a 502, never the upstream's auth error (the
      // client's own credentials were fine; the gateway's were not).
      return {
        ...base,
        retryable: true,
        key: { kind: 'auth-failed', status },
        overload: false,
        status: giveUpStatus['credentials-rejected'].status,
        error: {
          type: 'upstream_error',
          message: `the upstream rejected the gateway's credentials (${status})`,
          code: credentialsRejectedCode,
          status: giveUpStatus['credentials-rejected'].status,
        },
      }
    }
    if (status === 408 || status === 409)
      return {
        ...base,
        retryable: true,
        key: { kind: 'protocol-fault' },
        overload: false,
        status: 502,
      }
    if (status >= 500) {
      const overloaded = error?.type === 'overloaded_error'
      return {
        ...base,
        retryable: true,
        key: overloaded ? { kind: 'overloaded' } : { kind: 'server-error', status },
        overload: overloaded,
        status: status === 503 || status === 504 ? status : 502,
        retryAfterMs: rateLimitDelay(headers),
      }
    }
    return { ...base, retryable: false, key: { kind: 'rejected' }, overload: false, status }
  })()
  return override === undefined || verdict.key.kind === 'auth-failed'
    ? verdict
    : { ...verdict, retryable: override }
}

function fromErrorFrame(error: UpstreamErrorInfo): FailureVerdict {
  const rendered: RenderableError = {
    type: error.type,
    message: error.message,
    code: error.code,
    status: error.status,
  }
  const reason = `error-frame:${error.type}` as const
  if (isOverloaded(error) || error.status === 529) {
    return {
      retryable: true,
      key: { kind: 'overloaded' },
      reason,
      overload: true,
      status: 529,
      error: rendered,
    }
  }
  if (isRateLimit(error) || error.status === 429) {
    return {
      retryable: true,
      key: { kind: 'rate-limited' },
      reason,
      overload: true,
      status: 429,
      error: rendered,
    }
  }
  if (!error.retryable)
    return {
      retryable: false,
      key: { kind: 'rejected' },
      reason,
      overload: false,
      status: 400,
      error: rendered,
    }
  if (error.code === 'MALFORMED_FRAME') {
    return {
      retryable: true,
      key: { kind: 'protocol-fault' },
      reason: 'malformed-frame',
      overload: false,
      status: 502,
      error: rendered,
      recovery: 'at-once',
    }
  }
  return {
    retryable: true,
    key: { kind: 'server-error' },
    reason,
    overload: false,
    status: 502,
    error: rendered,
    recovery: 'at-once',
  }
}

/** Whether an upstream error says the provider is at capacity (type or code). */
function isOverloaded(error: UpstreamErrorInfo): boolean {
  return error.type === 'overloaded_error' || error.code === 'overloaded_error'
}

/** Whether an upstream error is a rate limit: Anthropic's type, OpenAI's code, Gemini's status word. */
function isRateLimit(error: UpstreamErrorInfo): boolean {
  return /rate_limit|RESOURCE_EXHAUSTED/.test(`${error.type} ${error.code ?? ''}`)
}

/**
 * A 2xx whose body is not an event stream. A proxy's page (`<title>502 Bad Gateway</title>`,
 * Envoy's `upstream connect error…`) or a JSON error served as success is an upstream fault:
 * retried like a malformed stream, never blamed on the client or the key. Only an explicit
 * rate-limit or overload error keeps its meaning.
 */
function fromNotSse(failure: Extract<AttemptFailure, { kind: 'not-sse' }>): FailureVerdict {
  const { error } = failure
  if (error !== undefined && (isOverloaded(error) || isRateLimit(error))) {
    const verdict: FailureVerdict = { ...fromErrorFrame(error), reason: 'not-sse' }
    const { headers } = failure
    const retryAfterMs = headers === undefined ? undefined : rateLimitDelay(headers)
    const headroom = headers === undefined ? undefined : parseHeadroom(headers)
    if (verdict.key.kind !== 'rate-limited') return verdict
    if (retryAfterMs === undefined && headroom === undefined) return verdict
    const key = { kind: 'rate-limited' as const, retryAfterMs, ...(headroom && { headroom }) }
    return { ...verdict, key, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) }
  }
  const message =
    error === undefined || error.code === 'MALFORMED_FRAME'
      ? `the upstream answered ${failure.status} with ${failure.contentType ?? 'no content type'}, not an event stream`
      : error.message
  const status = giveUpStatus['upstream-fault'].status
  return {
    retryable: true,
    key: { kind: 'protocol-fault' },
    reason: 'not-sse',
    overload: false,
    status,
    error: { type: 'upstream_error', message: sanitizeMessage(message), status },
  }
}

const peekMessages = {
  empty: 'the upstream stream ended without any output',
  'thinking-only': 'the upstream sent reasoning but no answer',
  'first-byte-timeout': 'the upstream sent no data in time',
  'first-output-timeout': 'the upstream sent no output in time',
  'silence-timeout': 'the upstream went silent before any output',
  'peek-overflow': 'the upstream sent too much before any output',
  'read-error': 'the upstream connection broke before any output',
} as const

/**
 * No data, or no output, within the peek's bound: retried on another key, 504 if it was the
 * last try. Also what an attempt gets when not even the response headers came in time.
 */
export function peekTimeoutVerdict(
  kind: 'first-byte-timeout' | 'first-output-timeout' | 'silence-timeout',
  timeoutMs: number,
): FailureVerdict {
  return {
    retryable: true,
    key: { kind: 'protocol-fault' },
    reason: kind,
    overload: false,
    status: 504,
    error: { type: 'timeout', message: `${peekMessages[kind]} (${timeoutMs} ms)` },
  }
}

function fromPeek(outcome: Exclude<PeekOutcome, { kind: 'output' }>): FailureVerdict {
  switch (outcome.kind) {
    case 'error-frame':
      return fromErrorFrame(outcome.error)
    case 'aborted':
      return {
        retryable: false,
        key: { kind: 'client-gone' },
        reason: 'client-gone',
        overload: false,
        status: 499,
        error: { type: 'client_closed', message: 'the request was aborted' },
      }
    case 'first-byte-timeout':
    case 'first-output-timeout':
    case 'silence-timeout':
      return peekTimeoutVerdict(outcome.kind, outcome.error.timeoutMs)
    default: {
      const reason = outcome.kind
      const message = peekMessages[outcome.kind]
      return {
        // Too much before any output: another attempt would be billed for as much and end
        // the same way (a stream showing reasoning is committed at the bound instead).
        retryable: outcome.kind !== 'peek-overflow',
        key: { kind: 'protocol-fault' },
        reason,
        overload: false,
        status: 502,
        error: { type: 'upstream_error', message },
        recovery: 'at-once',
      }
    }
  }
}

/**
 * A whole (non-streaming) answer that cannot go to the client: it held no output, its body
 * broke while it was read, or it is larger than `limit` bytes (not retried: another attempt
 * would answer as much).
 */
export function wholeAnswerVerdict(
  kind: 'empty' | 'read-error' | 'too-large',
  limit = 0,
): FailureVerdict {
  const { status, errorType } = giveUpStatus['upstream-fault']
  if (kind === 'too-large') {
    return {
      retryable: false,
      key: { kind: 'cancelled' },
      reason: 'answer-too-large',
      overload: false,
      status,
      error: {
        type: errorType,
        message: `the upstream's answer is larger than the ${limit} bytes the relay reads`,
      },
    }
  }
  const message =
    kind === 'empty'
      ? 'the upstream answered without any output'
      : 'the upstream connection broke before the whole answer arrived'
  return {
    retryable: true,
    key: { kind: 'protocol-fault' },
    reason: kind,
    overload: false,
    status,
    error: { type: errorType, message },
    recovery: 'at-once',
  }
}

/** What the client is told when its request failed at a step before it was sent. */
const notSentMessages: Readonly<Record<RequestNotSentStep, string>> = {
  body: 'the request body cannot be sent as JSON (nested too deep, cyclic or a BigInt)',
  request: 'the gateway has no request to send',
  url: 'the gateway could not build the upstream URL',
  headers: 'the gateway could not build the request headers',
  attempt: 'the gateway failed before sending the request',
}

/**
 * A request that failed before it left the process (invariant 28): the request's failure,
 * never the key's (`cancelled`: no cooldown, no circuit), and not retried on another key
 * (every one would fail the same way). A body that cannot be serialised is the client's 400;
 * anything else is the gateway's own 500.
 */
function notSentVerdict(step: RequestNotSentStep): FailureVerdict {
  const rule = giveUpStatus[step === 'body' ? 'unsendable-body' : 'not-sent']
  return {
    retryable: false,
    key: { kind: 'cancelled' },
    reason: 'request-not-sent',
    overload: false,
    status: rule.status,
    error: {
      type: rule.errorType,
      message: `${notSentMessages[step]}; it was not sent`,
      status: rule.status,
    },
  }
}

/**
 * Classifies a failed attempt: what the key is told, whether to retry, and which status and
 * error the client gets if this was the last try.
 *
 * - Retried: connection errors (not TLS or unknown hosts), 408, 409, 429, 5xx, 529, 401/403
 *   (with another key), empty streams, first-byte/first-output timeouts, retryable error
 *   frames, malformed or non-SSE bodies on a 2xx.
 * - Not retried: 400/404/422 and other 4xx, non-retryable error frames, an aborted request,
 *   a request that failed before it was sent (a body that cannot be serialised, a URL or a
 *   header that cannot be built, an attempt function that threw a `TypeError` or `RangeError`
 *   with no network code): never held against the key.
 * - `x-should-retry: true|false` overrides the status rule.
 *
 * @example
 * classifyAttemptFailure({ kind: 'status', status: 429, headers: new Headers({ 'retry-after': '20' }) })
 * // { retryable: true, key: { kind: 'rate-limited', retryAfterMs: 20000 }, status: 429, … }
 *
 * @group Retry decisions
 */
export function classifyAttemptFailure(failure: AttemptFailure): FailureVerdict {
  switch (failure.kind) {
    case 'status':
      return fromStatus(failure)
    case 'not-sse':
      return fromNotSse(failure)
    case 'connection': {
      const step = notSentStep(failure.error)
      if (step !== undefined) return notSentVerdict(step)
      const verdict = classifyConnectionError(failure.error)
      const stale = verdict.code !== undefined && staleConnectionCodes.has(verdict.code)
      return {
        retryable: verdict.retryable,
        key: verdict.retryable ? { kind: 'server-error' } : { kind: 'rejected' },
        reason: verdict.code === undefined ? 'connection-error' : `connection-${verdict.code}`,
        overload: false,
        status: 502,
        error: { type: 'upstream_error', message: verdict.message, code: verdict.code ?? null },
        ...(stale ? { staleConnection: true, recovery: 'at-once' as const } : {}),
      }
    }
    case 'peek':
      return fromPeek(failure.outcome)
  }
}
