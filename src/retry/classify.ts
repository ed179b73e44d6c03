/**
 * Why an attempt failed before commit, and what follows: retry or not, what the key is
 * told, which status the client gets if this was the last attempt. Pure functions.
 *
 * @module
 */

import type { KeyOutcome } from '../key-pool/types.js'
import type { PeekOutcome } from '../peek/index.js'
import { sanitizeMessage } from '../protocols/sanitize.js'
import type { RenderableError, UpstreamErrorInfo } from '../protocols/types.js'
import { rateLimitDelay } from './rate-limit-headers.js'

/** A failed attempt, as the relay saw it. */
export type AttemptFailure =
  /** The upstream answered with a non-2xx status. */
  | {
      readonly kind: 'status'
      readonly status: number
      readonly headers: Headers
      /** The error the body held, if it could be read. */
      readonly error?: UpstreamErrorInfo | undefined
    }
  /** A 2xx that is not an event stream (a JSON or HTML error served as success). */
  | {
      readonly kind: 'not-sse'
      readonly status: number
      readonly contentType: string | null
      readonly error?: UpstreamErrorInfo | undefined
    }
  /** `fetch` threw: connection refused, reset, DNS, TLS. */
  | { readonly kind: 'connection'; readonly error: unknown }
  /** The stream opened but peek found no output. */
  | { readonly kind: 'peek'; readonly outcome: Exclude<PeekOutcome, { kind: 'output' }> }

/** What follows from a failed attempt. */
export interface FailureVerdict {
  /** Whether another attempt may succeed. */
  readonly retry: boolean
  /** What the key pool is told. */
  readonly key: KeyOutcome
  /** A short stable reason: `status-429`, `empty-stream`, `first-output-timeout`, `error-frame`… */
  readonly reason: string
  /** Counts toward the route's consecutive-overload budget (429, 529, overload frames). */
  readonly overload: boolean
  /** The status to answer with if no attempt succeeds. */
  readonly status: number
  /** The error the client gets if no attempt succeeds (sanitised). */
  readonly error: RenderableError
  /** When the upstream said how long to wait. */
  readonly retryAfterMs?: number | undefined
}

const tlsCodes = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REVOKED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'HOSTNAME_MISMATCH',
  'ERR_SSL_WRONG_VERSION_NUMBER',
])

/** Bun's and Deno's names for the same failures. */
const codeAliases: Record<string, string> = {
  ConnectionRefused: 'ECONNREFUSED',
  ConnectionReset: 'ECONNRESET',
  ConnectionClosed: 'ECONNRESET',
  ConnectionAborted: 'ECONNRESET',
  FailedToOpenSocket: 'ECONNREFUSED',
  Timeout: 'ETIMEDOUT',
  TimedOut: 'ETIMEDOUT',
  BrokenPipe: 'EPIPE',
  NotFound: 'ENOTFOUND',
}

/** Words in messages (Deno puts the OS error in the text) that name a known failure. */
const messagePatterns: readonly [RegExp, string][] = [
  [/invalid peer certificate|certificate|UnknownIssuer|self[- ]signed/i, 'CERT_UNTRUSTED'],
  [/connection refused/i, 'ECONNREFUSED'],
  [/connection reset|reset by peer/i, 'ECONNRESET'],
  [/dns error|failed to lookup address|getaddrinfo|name or service not known/i, 'ENOTFOUND'],
  [/timed out/i, 'ETIMEDOUT'],
  [/broken pipe/i, 'EPIPE'],
]

const connectionMessages: Record<string, string> = {
  ECONNRESET: 'connection reset by the upstream',
  ECONNREFUSED: 'the upstream refused the connection',
  ETIMEDOUT: 'connecting to the upstream timed out',
  EPIPE: 'the upstream closed the connection while the request was sent',
  EAI_AGAIN: 'DNS lookup of the upstream failed temporarily',
  ENOTFOUND: 'the upstream host name does not resolve: check the base URL',
  UND_ERR_SOCKET: 'the upstream socket failed',
  UND_ERR_CONNECT_TIMEOUT: 'connecting to the upstream timed out',
  UND_ERR_HEADERS_TIMEOUT: 'the upstream sent no response headers in time',
  UND_ERR_BODY_TIMEOUT: 'the upstream body stalled',
}

/** What a `fetch` failure means: retryable or not, with a message a person can act on. */
export interface ConnectionErrorVerdict {
  readonly retryable: boolean
  /** The error code found on the error or its causes (`ECONNRESET`), if any. */
  readonly code: string | undefined
  readonly message: string
}

/**
 * Classifies whatever `fetch` threw by walking its `cause` chain (bounded; cycles are safe):
 * resets, refusals, timeouts and undici's `terminated` are retryable; TLS certificate
 * failures and unknown hosts are not.
 */
export function classifyConnectionError(error: unknown): ConnectionErrorVerdict {
  let current: unknown = error
  const seen = new Set<unknown>()
  let terminated = false
  let fromMessage: string | undefined
  for (
    let depth = 0;
    depth < 8 && typeof current === 'object' && current !== null && !seen.has(current);
    depth++
  ) {
    seen.add(current)
    const name = (current as { name?: unknown }).name
    if (name === 'AbortError') {
      return {
        retryable: false,
        code: 'ABORT_ERR',
        message: 'the request was aborted by the caller',
      }
    }
    if (name === 'TimeoutError') {
      return { retryable: true, code: 'ETIMEDOUT', message: connectionMessages.ETIMEDOUT as string }
    }
    const raw =
      (current as { code?: unknown }).code ??
      (typeof name === 'string' && name in codeAliases ? name : undefined)
    const code = typeof raw === 'string' ? (codeAliases[raw] ?? raw) : undefined
    if (code !== undefined) {
      const verdict = fromCode(code)
      if (verdict !== undefined) return verdict
    }
    const message = (current as { message?: unknown }).message
    if (typeof message === 'string') {
      if (/terminated|socket hang up|other side closed/i.test(message)) terminated = true
      fromMessage ??= messagePatterns.find(([pattern]) => pattern.test(message))?.[1]
    }
    current = (current as { cause?: unknown }).cause
  }
  const known = fromMessage === undefined || terminated ? undefined : fromCode(fromMessage)
  if (known !== undefined) return { ...known, code: undefined }
  return {
    retryable: true,
    code: undefined,
    message: terminated
      ? 'the upstream connection was terminated'
      : 'the request to the upstream failed',
  }
}

function fromCode(code: string): ConnectionErrorVerdict | undefined {
  if (tlsCodes.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('CERT_')) {
    return {
      retryable: false,
      code,
      message: `TLS certificate verification failed (${code}): check the proxy or corporate CA settings`,
    }
  }
  if (code === 'ENOTFOUND')
    return { retryable: false, code, message: connectionMessages.ENOTFOUND as string }
  if (code in connectionMessages)
    return { retryable: true, code, message: connectionMessages[code] as string }
  return undefined
}

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
    ? {
        type:
          status === 429
            ? 'rate_limit_error'
            : status >= 500
              ? 'upstream_error'
              : 'invalid_request_error',
        message: fallback,
        status,
      }
    : { type: error.type, message: error.message, code: error.code, status }
}

function fromStatus(failure: Extract<AttemptFailure, { kind: 'status' }>): FailureVerdict {
  const { status, headers, error } = failure
  const override = shouldRetryHeader(headers)
  const message = error?.message ?? `the upstream answered ${status}`
  const base = { reason: `status-${status}`, error: statusError(status, error, message) }
  const verdict = ((): FailureVerdict => {
    if (status === 429) {
      const retryAfterMs = rateLimitDelay(headers)
      return {
        ...base,
        retry: true,
        key: { kind: 'rate-limited', retryAfterMs },
        overload: true,
        status: 429,
        retryAfterMs,
      }
    }
    if (status === 529)
      return { ...base, retry: true, key: { kind: 'overloaded' }, overload: true, status: 529 }
    if (status === 401 || status === 403) {
      // Another key may work: the client gets a 502, never the upstream's auth error.
      return {
        ...base,
        retry: true,
        key: { kind: 'auth-failed', status },
        overload: false,
        status: 502,
        error: {
          type: 'upstream_error',
          message: `an upstream key was refused (${status})`,
          status: 502,
        },
      }
    }
    if (status === 408 || status === 409)
      return { ...base, retry: true, key: { kind: 'protocol-fault' }, overload: false, status: 502 }
    if (status >= 500) {
      const overloaded = error?.type === 'overloaded_error'
      return {
        ...base,
        retry: true,
        key: overloaded ? { kind: 'overloaded' } : { kind: 'server-error', status },
        overload: overloaded,
        status: status === 503 || status === 504 ? status : 502,
        retryAfterMs: rateLimitDelay(headers),
      }
    }
    return { ...base, retry: false, key: { kind: 'rejected' }, overload: false, status }
  })()
  return override === undefined || verdict.key.kind === 'auth-failed'
    ? verdict
    : { ...verdict, retry: override }
}

function fromErrorFrame(error: UpstreamErrorInfo): FailureVerdict {
  const rendered: RenderableError = {
    type: error.type,
    message: error.message,
    code: error.code,
    status: error.status,
  }
  const reason = `error-frame:${error.type}`
  if (error.type === 'overloaded_error' || error.status === 529) {
    return {
      retry: true,
      key: { kind: 'overloaded' },
      reason,
      overload: true,
      status: 529,
      error: rendered,
    }
  }
  if (/rate_limit|RESOURCE_EXHAUSTED/.test(error.type) || error.status === 429) {
    return {
      retry: true,
      key: { kind: 'rate-limited' },
      reason,
      overload: true,
      status: 429,
      error: rendered,
    }
  }
  if (!error.retryable)
    return {
      retry: false,
      key: { kind: 'rejected' },
      reason,
      overload: false,
      status: 400,
      error: rendered,
    }
  if (error.code === 'MALFORMED_FRAME') {
    return {
      retry: true,
      key: { kind: 'protocol-fault' },
      reason: 'malformed-frame',
      overload: false,
      status: 502,
      error: rendered,
    }
  }
  return {
    retry: true,
    key: { kind: 'server-error' },
    reason,
    overload: false,
    status: 502,
    error: rendered,
  }
}

const peekMessages = {
  empty: 'the upstream stream ended without any output',
  'thinking-only': 'the upstream sent reasoning but no answer',
  'first-byte-timeout': 'the upstream sent no data in time',
  'first-output-timeout': 'the upstream sent no output in time',
  'peek-overflow': 'the upstream sent too much before any output',
  'read-error': 'the upstream connection broke before any output',
} as const

function fromPeek(outcome: Exclude<PeekOutcome, { kind: 'output' }>): FailureVerdict {
  switch (outcome.kind) {
    case 'error-frame':
      return fromErrorFrame(outcome.error)
    case 'aborted':
      return {
        retry: false,
        key: { kind: 'client-gone' },
        reason: 'aborted',
        overload: false,
        status: 499,
        error: { type: 'client_closed', message: 'the request was aborted' },
      }
    case 'first-byte-timeout':
    case 'first-output-timeout': {
      const message = `${peekMessages[outcome.kind]} (${outcome.error.timeoutMs} ms)`
      return {
        retry: true,
        key: { kind: 'protocol-fault' },
        reason: outcome.kind,
        overload: false,
        status: 504,
        error: { type: 'timeout', message },
      }
    }
    default: {
      const reason = outcome.kind === 'empty' ? 'empty-stream' : outcome.kind
      const message = peekMessages[outcome.kind]
      return {
        retry: true,
        key: { kind: 'protocol-fault' },
        reason,
        overload: false,
        status: 502,
        error: { type: 'upstream_error', message },
      }
    }
  }
}

/**
 * Classifies a failed attempt: what the key is told, whether to retry, and which status and
 * error the client gets if this was the last try.
 *
 * - Retried: connection errors (not TLS or unknown hosts), 408, 409, 429, 5xx, 529, 401/403
 *   (with another key), empty streams, first-byte/first-output timeouts, retryable error
 *   frames, malformed or non-SSE bodies on a 2xx.
 * - Not retried: 400/404/422 and other 4xx, non-retryable error frames, an aborted request.
 * - `x-should-retry: true|false` overrides the status rule.
 *
 * @example
 * classifyAttemptFailure({ kind: 'status', status: 429, headers: new Headers({ 'retry-after': '20' }) })
 * // { retry: true, key: { kind: 'rate-limited', retryAfterMs: 20000 }, status: 429, … }
 */
export function classifyAttemptFailure(failure: AttemptFailure): FailureVerdict {
  switch (failure.kind) {
    case 'status':
      return fromStatus(failure)
    case 'not-sse': {
      const message =
        failure.error?.message ??
        `the upstream answered ${failure.status} with ${failure.contentType ?? 'no content type'}, not an event stream`
      if (failure.error !== undefined && failure.error.code !== 'MALFORMED_FRAME') {
        return { ...fromErrorFrame(failure.error), reason: 'not-sse' }
      }
      return {
        retry: true,
        key: { kind: 'protocol-fault' },
        reason: 'not-sse',
        overload: false,
        status: 502,
        error: { type: 'upstream_error', message: sanitizeMessage(message) },
      }
    }
    case 'connection': {
      const verdict = classifyConnectionError(failure.error)
      return {
        retry: verdict.retryable,
        key: verdict.retryable ? { kind: 'server-error' } : { kind: 'rejected' },
        reason: verdict.code === undefined ? 'connection-error' : `connection-${verdict.code}`,
        overload: false,
        status: 502,
        error: { type: 'upstream_error', message: verdict.message, code: verdict.code ?? null },
      }
    }
    case 'peek':
      return fromPeek(failure.outcome)
  }
}
