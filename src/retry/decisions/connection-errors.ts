/**
 * What `fetch` threw, as a verdict a person can act on: connection error codes across Node,
 * Bun and Deno, TLS problems with advice, and which ones are worth another attempt
 * (`classifyConnectionError`).
 *
 * @module
 */

import { isRequestNotSentError, type RequestNotSentStep } from '../../errors.js'

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
  ERR_UPSTREAM_UPGRADE:
    'the upstream answered 101 Switching Protocols to a request that asked for no upgrade',
}

/** Codes of a connection that died under a request (not a refusal): a pooled socket may be stale. */
export const staleConnectionCodes = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET'])

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

/** Node's codes for an argument, URL or header refused before anything was sent. */
const preSendCode = /^ERR_(?:INVALID_|HTTP_INVALID_|UNESCAPED_CHARACTERS|MISSING_ARGS|OUT_OF_RANGE)/

/** The language's own errors: a bug or a value it cannot handle, never a network's word. */
const programmingErrors = new Set([
  'TypeError',
  'RangeError',
  'SyntaxError',
  'ReferenceError',
  'URIError',
  'EvalError',
])

/** A thrown value with none of an error's fields: no `name`, `message`, `code` or `cause`. */
function shapeless(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return typeof error !== 'function'
  if (error instanceof Error) return false
  const { name, message, code, cause } = error as Record<string, unknown>
  return name === undefined && message === undefined && code === undefined && cause === undefined
}

/** Words with which runtimes and HTTP libraries name a network failure. */
const networkWords =
  /fetch failed|failed to fetch|network|load failed|terminated|socket|other side closed|connect|refused|reset|broken pipe|timed? ?out|dns|getaddrinfo|certificate|handshake|tls|ssl|EAI_|ECONN|EPIPE|ETIMEDOUT|ENOTFOUND/i

/**
 * Whether an error an attempt function threw happened before its request left the process, and
 * at which step: a `RequestNotSentError` (the ready attempts), or an error of the language's own
 * (`TypeError`, `RangeError`, `SyntaxError`…) or one of Node's argument codes
 * (`ERR_INVALID_ARG_TYPE`, `ERR_INVALID_URL`…) with no sign of the network anywhere on it or
 * its causes (no connection code, no abort or timeout, no network words). Such a failure is
 * the request's, never the key's; so is a thrown value of no error's shape (a number, `null`,
 * an object with no `name`, `message`, `code` or `cause`). `undefined` for anything else
 * (judged as a connection error).
 */
export function notSentStep(error: unknown): RequestNotSentStep | undefined {
  try {
    return stepOf(error)
  } catch {
    // An error whose fields throw when read is the attempt function's own doing.
    return 'attempt'
  }
}

function stepOf(error: unknown): RequestNotSentStep | undefined {
  if (isRequestNotSentError(error)) return error.step
  // A thrown value of no error's shape (a number, `null`, a bare object) says nothing of a
  // network: it is the attempt function's own failure, not the key's.
  if (shapeless(error)) return 'attempt'
  let current: unknown = error
  let preSend = false
  const seen = new Set<unknown>()
  for (
    let depth = 0;
    depth < 8 && typeof current === 'object' && current !== null && !seen.has(current);
    depth++
  ) {
    seen.add(current)
    const { name, code, message } = current as { name?: unknown; code?: unknown; message?: unknown }
    if (name === 'AbortError' || name === 'TimeoutError') return undefined
    if (typeof code === 'string') {
      if (!preSendCode.test(code)) return undefined
      preSend = true
    }
    if (typeof message === 'string' && networkWords.test(message)) return undefined
    if (depth === 0 && typeof name === 'string' && programmingErrors.has(name)) preSend = true
    current = (current as { cause?: unknown }).cause
  }
  return preSend ? 'attempt' : undefined
}
