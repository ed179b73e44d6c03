import { describe, expect, it } from 'vitest'
import {
  classifyAttemptFailure,
  classifyConnectionError,
  parseRetryAfter,
} from '../../src/advanced.js'
import { errorFromBody } from '../../src/retry/decisions/error-body.js'
import {
  parseResetDuration,
  parseResetTimestamp,
  parseRetryAfterMs,
  rateLimitDelay,
  unifiedRateLimitMessage,
} from '../../src/retry/decisions/rate-limit-headers.js'

const now = Date.parse('2026-11-29T12:00:00Z')

describe('rate-limit headers', () => {
  it.each([
    ['20', 20_000],
    ['1.5', 1500],
    ['Sun, 29 Nov 2026 12:00:30 GMT', 30_000],
    ['Sun, 29 Nov 2026 11:59:00 GMT', 0],
    ['soon', undefined],
    ['-3', undefined],
    ['', undefined],
  ])('retry-after %j → %j ms', (value, expected) => {
    expect(parseRetryAfter(value, now)).toBe(expected)
  })

  it.each([
    ['6m0s', 360_000],
    ['1s', 1000],
    ['20ms', 20],
    ['1h2m3.5s', 3_723_500],
    ['0.5s', 500],
    ['abc', undefined],
    ['5', undefined],
  ])('reset duration %j → %j ms', (value, expected) => {
    expect(parseResetDuration(value)).toBe(expected)
  })

  it('parses retry-after-ms and RFC 3339 reset timestamps', () => {
    expect(parseRetryAfterMs('250')).toBe(250)
    expect(parseRetryAfterMs('x')).toBeUndefined()
    expect(parseResetTimestamp('2026-11-29T12:00:05Z', now)).toBe(5000)
    expect(parseResetTimestamp('2026-11-29T11:00:05Z', now)).toBe(0)
  })

  it('prefers retry-after-ms, then retry-after, then the latest exhausted reset', () => {
    expect(rateLimitDelay(new Headers({ 'retry-after-ms': '150', 'retry-after': '9' }), now)).toBe(
      150,
    )
    expect(
      rateLimitDelay(new Headers({ 'retry-after': '9', 'x-ratelimit-reset-requests': '1s' }), now),
    ).toBe(9000)
    expect(
      rateLimitDelay(
        new Headers({
          'x-ratelimit-reset-requests': '1s',
          'x-ratelimit-remaining-requests': '10',
          'x-ratelimit-reset-tokens': '6m0s',
          'x-ratelimit-remaining-tokens': '0',
        }),
        now,
      ),
    ).toBe(360_000)
    expect(
      rateLimitDelay(
        new Headers({
          'anthropic-ratelimit-requests-reset': '2026-11-29T12:00:10Z',
          'anthropic-ratelimit-requests-remaining': '0',
          'anthropic-ratelimit-tokens-reset': '2026-11-29T12:01:00Z',
          'anthropic-ratelimit-tokens-remaining': '5000',
        }),
        now,
      ),
    ).toBe(10_000)
    expect(
      rateLimitDelay(
        new Headers({ 'x-ratelimit-reset-requests': '2s', 'x-ratelimit-reset-tokens': '1s' }),
        now,
      ),
    ).toBe(1000)
    expect(rateLimitDelay(new Headers(), now)).toBeUndefined()
  })

  // A wait too long to be meant is still a wait: the pool caps it at maxCooldownMs; reading it
  // as malformed would put the key back after the 10 s default.
  const century = 100 * 365 * 86_400_000
  const nines = '9'.repeat(400)
  it.each([
    ['retry-after-ms: 1e12', { 'retry-after-ms': '1e12' }, 1e12],
    ['retry-after-ms: 2.5E3', { 'retry-after-ms': '2.5E3' }, 2500],
    ['retry-after-ms: 400 nines', { 'retry-after-ms': nines }, century],
    ['retry-after: 1e12', { 'retry-after': '1e12' }, century],
    ['retry-after: 400 nines', { 'retry-after': nines }, century],
    ['retry-after: 31536000000', { 'retry-after': '31536000000' }, century],
    ['retry-after: year 9999', { 'retry-after': 'Fri, 31 Dec 9999 23:59:59 GMT' }, century],
    ['x-ratelimit-reset-*: 400 nines h', { 'x-ratelimit-reset-requests': `${nines}h` }, century],
    [
      'anthropic-ratelimit-*-reset: year 275760',
      { 'anthropic-ratelimit-requests-reset': '+275760-09-13T00:00:00Z' },
      century,
    ],
    [
      'anthropic-ratelimit-unified-5h-reset: 1e300',
      {
        'anthropic-ratelimit-unified-status': 'rejected',
        'anthropic-ratelimit-unified-5h-status': 'rejected',
        'anthropic-ratelimit-unified-5h-reset': '1e300',
      },
      century,
    ],
  ])('a huge wait (%s) is read as a long wait, never as malformed', (_, headers, expected) => {
    const delay = rateLimitDelay(new Headers(headers), now)
    expect(delay).toBe(expected)
    expect(String(delay)).toMatch(/^\d+$/)
    expect(() => unifiedRateLimitMessage(new Headers(headers), now)).not.toThrow()
  })

  it.each(['-1e3', '1e', 'e3', '0x10', 'Infinity', '1e3.5'])(
    'retry-after-ms %j is still malformed',
    (value) => {
      expect(parseRetryAfterMs(value)).toBeUndefined()
      expect(parseRetryAfter(value, now)).toBeUndefined()
    },
  )
})

describe('classifyAttemptFailure', () => {
  const status = (code: number, headers: Record<string, string> = {}) =>
    classifyAttemptFailure({ kind: 'status', status: code, headers: new Headers(headers) })

  it.each([
    [408, true, 'protocol-fault'],
    [409, true, 'protocol-fault'],
    [429, true, 'rate-limited'],
    [500, true, 'server-error'],
    [502, true, 'server-error'],
    [503, true, 'server-error'],
    [529, true, 'overloaded'],
    [401, true, 'auth-failed'],
    [403, true, 'auth-failed'],
    [400, false, 'rejected'],
    [404, false, 'rejected'],
    [422, false, 'rejected'],
  ])('status %i → retry %s, key %s', (code, retry, key) => {
    const verdict = status(code)
    expect(verdict.retryable).toBe(retry)
    expect(verdict.key.kind).toBe(key)
  })

  it('lets x-should-retry override the status rule', () => {
    expect(status(503, { 'x-should-retry': 'false' }).retryable).toBe(false)
    expect(status(400, { 'x-should-retry': 'true' }).retryable).toBe(true)
  })

  it('passes the wait a 429 asked for to the key and marks it as overload', () => {
    const verdict = status(429, { 'retry-after': '20' })
    expect(verdict).toMatchObject({
      key: { kind: 'rate-limited', retryAfterMs: 20_000 },
      overload: true,
      status: 429,
    })
  })

  it('never shows the client an upstream auth error', () => {
    expect(status(401).status).toBe(502)
  })

  it('classifies peek outcomes: empty and timeouts are protocol faults, aborts are the client going away', () => {
    const base = { frames: [], reader: {} as never, tracker: {} as never, elapsedMs: 1 }
    expect(
      classifyAttemptFailure({
        kind: 'peek',
        outcome: { ...base, kind: 'empty', eof: { kind: 'empty' } },
      }),
    ).toMatchObject({
      retryable: true,
      key: { kind: 'protocol-fault' },
      reason: 'empty',
      status: 502,
    })
    expect(
      classifyAttemptFailure({ kind: 'peek', outcome: { ...base, kind: 'aborted', reason: 'x' } }),
    ).toMatchObject({
      retryable: false,
      key: { kind: 'client-gone' },
      reason: 'client-gone',
      status: 499,
    })
  })

  it('reads error frames: overload and rate limits are overload, invalid requests are not retried', () => {
    const frame = (type: string, retryable: boolean) =>
      classifyAttemptFailure({
        kind: 'peek',
        outcome: {
          frames: [],
          reader: {} as never,
          tracker: {} as never,
          elapsedMs: 1,
          kind: 'error-frame',
          error: { type, message: 'm', code: null, status: null, retryable },
        },
      })
    expect(frame('overloaded_error', true)).toMatchObject({
      retryable: true,
      overload: true,
      key: { kind: 'overloaded' },
      status: 529,
    })
    expect(frame('rate_limit_error', true)).toMatchObject({
      retryable: true,
      overload: true,
      key: { kind: 'rate-limited' },
    })
    expect(frame('invalid_request_error', false)).toMatchObject({
      retryable: false,
      key: { kind: 'rejected' },
    })
  })
})

describe('classifyConnectionError', () => {
  const undici = (code: string, message = 'x') =>
    Object.assign(new TypeError('fetch failed'), {
      cause: Object.assign(new Error(message), { code }),
    })

  it.each(['ECONNRESET', 'ECONNREFUSED', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN', 'UND_ERR_SOCKET'])(
    '%s is retryable',
    (code) => {
      expect(classifyConnectionError(undici(code))).toMatchObject({ retryable: true, code })
    },
  )

  const selfSigned = /is self-signed .*NODE_EXTRA_CA_CERTS/
  const expired = /has expired: the upstream must renew it/
  const notYetValid = /is not valid yet: check this machine's clock/
  const untrusted =
    /chain is incomplete or its CA is not trusted here: check the proxy or corporate CA settings/
  const hostname = /does not cover the host name: check the base URL's host/
  const revoked = /has been revoked/
  const notTls = /did not answer with TLS/
  const other = /certificate, its signature or its revocation data is invalid/

  // Every code of Node's "X509 certificate error codes" list, plus Node's own TLS codes.
  it.each([
    ['DEPTH_ZERO_SELF_SIGNED_CERT', selfSigned],
    ['SELF_SIGNED_CERT_IN_CHAIN', selfSigned],
    ['CERT_HAS_EXPIRED', expired],
    ['CERT_NOT_YET_VALID', notYetValid],
    ['UNABLE_TO_GET_ISSUER_CERT', untrusted],
    ['UNABLE_TO_GET_ISSUER_CERT_LOCALLY', untrusted],
    ['UNABLE_TO_VERIFY_LEAF_SIGNATURE', untrusted],
    ['CERT_UNTRUSTED', untrusted],
    ['INVALID_CA', untrusted],
    ['CERT_CHAIN_TOO_LONG', untrusted],
    ['PATH_LENGTH_EXCEEDED', untrusted],
    ['ERR_TLS_CERT_ALTNAME_INVALID', hostname],
    ['HOSTNAME_MISMATCH', hostname],
    ['CERT_REVOKED', revoked],
    ['ERR_SSL_WRONG_VERSION_NUMBER', notTls],
    ['UNABLE_TO_GET_CRL', other],
    ['UNABLE_TO_DECRYPT_CERT_SIGNATURE', other],
    ['UNABLE_TO_DECRYPT_CRL_SIGNATURE', other],
    ['UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY', other],
    ['CERT_SIGNATURE_FAILURE', other],
    ['CRL_SIGNATURE_FAILURE', other],
    ['CRL_NOT_YET_VALID', other],
    ['CRL_HAS_EXPIRED', other],
    ['ERROR_IN_CERT_NOT_BEFORE_FIELD', other],
    ['ERROR_IN_CERT_NOT_AFTER_FIELD', other],
    ['ERROR_IN_CRL_LAST_UPDATE_FIELD', other],
    ['ERROR_IN_CRL_NEXT_UPDATE_FIELD', other],
    ['OUT_OF_MEM', other],
    ['INVALID_PURPOSE', other],
    ['CERT_REJECTED', other],
    ['ERR_TLS_CERT_ALTNAME_FORMAT', other],
    ['ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE', other],
  ])('%s is a TLS failure, not retried, with an actionable message', (code, message) => {
    const verdict = classifyConnectionError(undici(code))
    expect(verdict).toMatchObject({ retryable: false, code })
    expect(verdict.message).toMatch(
      new RegExp(`^TLS certificate verification failed \\(${code}\\): `),
    )
    expect(verdict.message).toMatch(message)
    expect(classifyAttemptFailure({ kind: 'connection', error: undici(code) })).toMatchObject({
      retryable: false,
      status: 502,
      reason: `connection-${code}`,
    })
  })

  it.each([
    ['ERR_TLS_HANDSHAKE_TIMEOUT', undici('ERR_TLS_HANDSHAKE_TIMEOUT')],
    [undefined, new TypeError('client error (Connect): TLS handshake timed out')],
  ])('a handshake timeout (%s) is a timeout: retried, and the message says so', (code, error) => {
    const verdict = classifyConnectionError(error)
    expect(verdict).toMatchObject({ retryable: true, code })
    expect(verdict.message).toBe('the TLS handshake with the upstream timed out')
  })

  it.each([
    ['invalid peer certificate: Expired', expired],
    ['invalid peer certificate: NotValidForName', hostname],
    ['invalid peer certificate: UnknownIssuer', untrusted],
    ['self signed certificate in certificate chain', selfSigned],
  ])('reads a certificate failure from a message alone: %s', (text, message) => {
    const verdict = classifyConnectionError(new TypeError(`client error (Connect): ${text}`))
    expect(verdict.retryable).toBe(false)
    expect(verdict.message).toMatch(message)
  })

  it('treats an unknown host as final and undici terminated as retryable', () => {
    expect(classifyConnectionError(undici('ENOTFOUND'))).toMatchObject({ retryable: false })
    expect(classifyConnectionError(new TypeError('terminated'))).toMatchObject({
      retryable: true,
      message: 'the upstream connection was terminated',
    })
  })

  it('walks a cyclic cause chain without hanging', () => {
    const a = new Error('a') as Error & { cause?: unknown }
    const b = new Error('b', { cause: a })
    a.cause = b
    expect(classifyConnectionError(a).retryable).toBe(true)
  })
})

describe('errorFromBody', () => {
  it('reads OpenAI, Anthropic and Gemini error bodies and reduces HTML pages to their title', () => {
    expect(
      errorFromBody('{"error":{"message":"Rate limit","type":"rate_limit_error"}}', 429),
    ).toMatchObject({ type: 'rate_limit_error', message: 'Rate limit', status: 429 })
    expect(
      errorFromBody(
        '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        529,
      ),
    ).toMatchObject({ type: 'overloaded_error' })
    expect(
      errorFromBody('{"error":{"code":503,"message":"busy","status":"UNAVAILABLE"}}', 503),
    ).toMatchObject({ type: 'UNAVAILABLE', retryable: true })
    expect(errorFromBody('<html><title>502 Bad Gateway</title></html>', 502)).toMatchObject({
      message: '502 Bad Gateway',
    })
    expect(errorFromBody('', 500)).toBeUndefined()
  })
})
