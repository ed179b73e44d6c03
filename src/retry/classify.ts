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
import { errorTypeForStatus } from './error-body.js'
import { rateLimitDelay, unifiedRateLimitMessage } from './rate-limit-headers.js'

/**
 * A failed attempt, as the relay saw it.
 *
 * @group Retry decisions
 */
export type AttemptFailure =
  /** The upstream answered with a non-2xx status. */
  | {
      readonly kind: 'status'
      readonly status: number
      readonly headers: Headers
      /** The error the body held, if it could be read. */
      readonly error?: UpstreamErrorInfo | undefined
    }
  /**
   * A 2xx that is not an event stream: an HTML or text page from a proxy, or a JSON error,
   * served as success. The upstream's fault, never the client's.
   */
  | {
      readonly kind: 'not-sse'
      readonly status: number
      readonly contentType: string | null
      readonly error?: UpstreamErrorInfo | undefined
      /** The response's headers: a rate limit stated in the body is timed by them. */
      readonly headers?: Headers | undefined
    }
  /** `fetch` threw: connection refused, reset, DNS, TLS. */
  | { readonly kind: 'connection'; readonly error: unknown }
  /** The stream opened but peek found no output. */
  | { readonly kind: 'peek'; readonly outcome: Exclude<PeekOutcome, { kind: 'output' }> }

/**
 * Why an attempt failed, or why the request gave up without one: a closed set, the HTTP
 * status, connection code or error type carried in the template parts. A request the
 * relay's `adjustRequest` or context-window fit changed says so with `:request-adjusted`.
 *
 * @group Retry decisions
 */
export type BaseFailureReason =
  | `status-${number}`
  | `redirect-${number}`
  | `connection-${string}`
  | 'connection-error'
  | `error-frame:${string}`
  | 'malformed-frame'
  | 'not-sse'
  | 'empty'
  | 'thinking-only'
  | 'first-byte-timeout'
  | 'first-output-timeout'
  | 'peek-overflow'
  | 'read-error'
  | 'answer-too-large'
  | 'fallback-timeout'
  | 'deadline'
  | 'streaming-unsupported'
  | 'invalid-attempt-result'
  | 'client-gone'
  | 'hedge-lost'
  | 'all-keys-busy'
  | 'all-keys-rate-limited'
  | 'all-keys-cooling'
  | 'all-keys-rejected'
  | `no-key:${'no-keys' | 'all-disabled' | 'all-excluded'}`

/**
 * A {@link BaseFailureReason}, or one for a request the relay changed and tried again.
 *
 * @group Retry decisions
 */
export type FailureReason = BaseFailureReason | `${BaseFailureReason}:request-adjusted`

/**
 * What follows from a failed attempt.
 *
 * @group Retry decisions
 */
export interface FailureVerdict {
  /** Whether another attempt may succeed. */
  readonly retryable: boolean
  /** What the key pool is told. */
  readonly key: KeyOutcome
  /** A short stable reason: `status-429`, `empty`, `first-output-timeout`, `error-frame:…`… */
  readonly reason: FailureReason
  /** Counts toward the route's consecutive-overload budget (429, 529, overload frames). */
  readonly overload: boolean
  /** The status to answer with if no attempt succeeds. */
  readonly status: number
  /** The error the client gets if no attempt succeeds (sanitised). */
  readonly error: RenderableError
  /** When the upstream said how long to wait. */
  readonly retryAfterMs?: number | undefined
  /**
   * How soon a retry may follow. `at-once` for a fault that says nothing about load (an
   * empty stream or answer, a cut or a retryable non-overload error frame before output, a
   * reset before any response): another key at once, or the same key after a short jittered
   * pause. Anything else (429, 503, 529, overload, refused connections, timeouts, other 5xx)
   * backs off.
   * @default 'backoff'
   */
  readonly recovery?: 'at-once' | 'backoff' | undefined
  /**
   * The attempt died of a reset or a broken pipe before any response: a pooled keep-alive
   * connection may be stale, so the next attempt asks for a fresh one.
   */
  readonly staleConnection?: boolean | undefined
}

/** What a certificate-verification failure means for the person who must fix it. */
type TlsProblem =
  | 'self-signed'
  | 'expired'
  | 'not-yet-valid'
  | 'untrusted'
  | 'hostname'
  | 'revoked'
  | 'not-tls'
  | 'other'

/** OpenSSL's verification codes as Node reports them (tls docs, "X509 certificate error codes"). */
const tlsProblems: Readonly<Record<string, TlsProblem>> = {
  DEPTH_ZERO_SELF_SIGNED_CERT: 'self-signed',
  SELF_SIGNED_CERT_IN_CHAIN: 'self-signed',
  CERT_HAS_EXPIRED: 'expired',
  CERT_NOT_YET_VALID: 'not-yet-valid',
  UNABLE_TO_GET_ISSUER_CERT: 'untrusted',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'untrusted',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'untrusted',
  CERT_UNTRUSTED: 'untrusted',
  INVALID_CA: 'untrusted',
  CERT_CHAIN_TOO_LONG: 'untrusted',
  PATH_LENGTH_EXCEEDED: 'untrusted',
  ERR_TLS_CERT_ALTNAME_INVALID: 'hostname',
  HOSTNAME_MISMATCH: 'hostname',
  CERT_REVOKED: 'revoked',
  ERR_SSL_WRONG_VERSION_NUMBER: 'not-tls',
  UNABLE_TO_GET_CRL: 'other',
  UNABLE_TO_DECRYPT_CERT_SIGNATURE: 'other',
  UNABLE_TO_DECRYPT_CRL_SIGNATURE: 'other',
  UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY: 'other',
  CERT_SIGNATURE_FAILURE: 'other',
  CRL_SIGNATURE_FAILURE: 'other',
  CRL_NOT_YET_VALID: 'other',
  CRL_HAS_EXPIRED: 'other',
  ERROR_IN_CERT_NOT_BEFORE_FIELD: 'other',
  ERROR_IN_CERT_NOT_AFTER_FIELD: 'other',
  ERROR_IN_CRL_LAST_UPDATE_FIELD: 'other',
  ERROR_IN_CRL_NEXT_UPDATE_FIELD: 'other',
  OUT_OF_MEM: 'other',
  INVALID_PURPOSE: 'other',
  CERT_REJECTED: 'other',
}

const tlsAdvice: Readonly<Record<TlsProblem, string>> = {
  'self-signed':
    "the upstream's certificate is self-signed (or a proxy on the way re-signs traffic): trust its CA with NODE_EXTRA_CA_CERTS, or check the base URL",
  expired:
    "the upstream's certificate has expired: the upstream must renew it (or this machine's clock is wrong)",
  'not-yet-valid': "the upstream's certificate is not valid yet: check this machine's clock",
  untrusted:
    "the upstream's certificate chain is incomplete or its CA is not trusted here: check the proxy or corporate CA settings (NODE_EXTRA_CA_CERTS), or the upstream must send its intermediate certificates",
  hostname: "the upstream's certificate does not cover the host name: check the base URL's host",
  revoked: "the upstream's certificate has been revoked: the upstream must replace it",
  'not-tls':
    "the upstream did not answer with TLS: check the base URL's scheme and port (https to a plain HTTP port?)",
  other:
    "the upstream's certificate, its signature or its revocation data is invalid: check the upstream's TLS setup and any proxy or CA settings",
}

/** Handshake timeouts are slowness, not a certificate problem: retried. */
const tlsTimeoutCodes = new Set(['ERR_TLS_HANDSHAKE_TIMEOUT'])

function tlsProblem(code: string): TlsProblem | undefined {
  if (Object.hasOwn(tlsProblems, code)) return tlsProblems[code]
  if (/^(?:ERR_TLS_|ERR_SSL_|CERT_|CRL_)/.test(code)) return 'other'
  return undefined
}

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
  [/handshake (?:timed out|timeout)/i, 'ERR_TLS_HANDSHAKE_TIMEOUT'],
  [/self[- ]signed/i, 'DEPTH_ZERO_SELF_SIGNED_CERT'],
  [/certificate has expired|peer certificate: Expired/i, 'CERT_HAS_EXPIRED'],
  [/NotValidForName|not valid for (?:the )?(?:host )?name/i, 'HOSTNAME_MISMATCH'],
  [/invalid peer certificate|certificate|UnknownIssuer/i, 'CERT_UNTRUSTED'],
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

/** Codes of a connection that died under a request (not a refusal): a pooled socket may be stale. */
const staleConnectionCodes = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET'])

/**
 * What a `fetch` failure means: retryable or not, with a message a person can act on.
 *
 * @group Retry decisions
 */
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
 *
 * @group Retry decisions
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
  if (tlsTimeoutCodes.has(code)) {
    return { retryable: true, code, message: 'the TLS handshake with the upstream timed out' }
  }
  const problem = tlsProblem(code)
  if (problem !== undefined) {
    return {
      retryable: false,
      code,
      message: `TLS certificate verification failed (${code}): ${tlsAdvice[problem]}`,
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
      const window = unifiedRateLimitMessage(headers)
      return {
        ...base,
        ...(window === undefined
          ? {}
          : { error: { ...base.error, message: `${base.error.message} (${window})` } }),
        retryable: true,
        key: { kind: 'rate-limited', retryAfterMs },
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
    const retryAfterMs = failure.headers === undefined ? undefined : rateLimitDelay(failure.headers)
    if (retryAfterMs === undefined || verdict.key.kind !== 'rate-limited') return verdict
    return { ...verdict, key: { kind: 'rate-limited', retryAfterMs }, retryAfterMs }
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
  'peek-overflow': 'the upstream sent too much before any output',
  'read-error': 'the upstream connection broke before any output',
} as const

/**
 * No data, or no output, within the peek's bound: retried on another key, 504 if it was the
 * last try. Also what an attempt gets when not even the response headers came in time.
 */
export function peekTimeoutVerdict(
  kind: 'first-byte-timeout' | 'first-output-timeout',
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
 * @internal exported for tests
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
} as const)

/**
 * The `code` of an error saying the upstream rejected the gateway's credentials.
 * @internal exported for tests
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
 * usable, else 1 s: a release may free a key at any time). Not a rate limit (invariant 13).
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
 * auth holds. 503 with `Retry-After`; never called a rate limit (invariant 13).
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
