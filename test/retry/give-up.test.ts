import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  openaiChat,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { classifyAttemptFailure } from '../../src/retry/decisions/classify.js'
import { errorFromBody } from '../../src/retry/decisions/error-body.js'
import {
  busyVerdict,
  coolingVerdict,
  credentialsRejectedCode,
  credentialsRejectedVerdict,
  giveUpStatus,
  noKeyVerdict,
  rateLimitedVerdict,
} from '../../src/retry/decisions/pool-verdicts.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

/** What the relay does with a 2xx whose body is not an event stream. */
function notSse(body: string, contentType: string, headers: Record<string, string> = {}) {
  return classifyAttemptFailure({
    kind: 'not-sse',
    status: 200,
    contentType,
    error: errorFromBody(body, 200),
    headers: new Headers({ 'content-type': contentType, ...headers }),
  })
}

const nginx =
  '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n'
const envoy =
  'upstream connect error or disconnect/reset before headers. retried and the latest reset reason: remote connection failure, transport failure reason: delayed connect error: 111'

describe('a 2xx body that is not an event stream is an upstream fault', () => {
  it.each([
    ['an nginx page', nginx, 'text/html', '502 Bad Gateway'],
    ['an Envoy reset', envoy, 'text/plain', envoy],
    [
      'a JSON invalid_request_error',
      '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}',
      'application/json',
      'prompt is too long',
    ],
    [
      'a JSON server_error',
      '{"error":{"message":"upstream busy","type":"server_error"}}',
      'application/json',
      'upstream busy',
    ],
    [
      'an empty body',
      '',
      'text/html',
      'the upstream answered 200 with text/html, not an event stream',
    ],
    ['a JSON array', '[1,2]', 'application/json', '[1,2]'],
  ])('%s → retried, protocol-fault, 502 upstream_error', (_, body, contentType, message) => {
    const verdict = notSse(body, contentType)
    expect(verdict).toEqual({
      retryable: true,
      key: { kind: 'protocol-fault' },
      reason: 'not-sse',
      overload: false,
      status: 502,
      error: { type: 'upstream_error', message, status: 502 },
    })
  })

  it('keeps the meaning of an explicit rate limit, timed by the headers', () => {
    const verdict = notSse(
      '{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}',
      'application/json',
      { 'retry-after': '17' },
    )
    expect(verdict).toMatchObject({
      retryable: true,
      key: { kind: 'rate-limited', retryAfterMs: 17_000 },
      overload: true,
      status: 429,
      retryAfterMs: 17_000,
      reason: 'not-sse',
    })
  })

  it.each([
    [
      '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
      529,
      'overloaded',
    ],
    [
      '{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}',
      429,
      'rate-limited',
    ],
    [
      '{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}',
      429,
      'rate-limited',
    ],
  ])('keeps overload and rate-limit meaning: %s → %i', (body, status, key) => {
    const verdict = notSse(body, 'application/json')
    expect(verdict).toMatchObject({ retryable: true, overload: true, status, key: { kind: key } })
  })

  it('never reports the key rejected for a page served as success', () => {
    for (const body of [nginx, envoy, '{"error":{"type":"invalid_request_error"}}', 'x']) {
      expect(notSse(body, 'text/html').key.kind).not.toBe('rejected')
    }
  })
})

describe('errorFromBody types a body in no known shape by its status', () => {
  it.each([
    [200, 'upstream_error'],
    [204, 'upstream_error'],
    [400, 'invalid_request_error'],
    [404, 'invalid_request_error'],
    [429, 'rate_limit_error'],
    [500, 'upstream_error'],
    [502, 'upstream_error'],
  ])('status %i → %s', (status, type) => {
    expect(errorFromBody('<html><title>Oops</title></html>', status)).toMatchObject({
      type,
      message: 'Oops',
    })
  })
})

describe('pool-level give-up verdicts follow the give-up table', () => {
  it.each([
    [
      'busy, no cooling key',
      busyVerdict(undefined),
      'busy',
      1000,
      'every upstream key is busy (at its concurrency limit); retry in 1 s',
    ],
    [
      'busy, a key cools for 2.5 s',
      busyVerdict(2500),
      'busy',
      2500,
      'every upstream key is busy (at its concurrency limit); retry in 3 s',
    ],
    [
      'rate limited',
      rateLimitedVerdict(20_000),
      'rate-limited',
      20_000,
      'every upstream key is rate limited; retry in 20 s',
    ],
    [
      'cooling after failures',
      coolingVerdict(30_000),
      'cooling',
      30_000,
      'every upstream key is cooling down after upstream failures; retry in 30 s',
    ],
    [
      'credentials rejected',
      credentialsRejectedVerdict(['key-a', 'key-b']),
      'credentials-rejected',
      undefined,
      "the upstream rejected the gateway's credentials for every key (key-a, key-b)",
    ],
    ['no keys', noKeyVerdict('no-keys'), 'no-key', undefined, 'no upstream key is configured'],
  ] as const)('%s', (_, verdict, kind, retryAfterMs, message) => {
    const rule = giveUpStatus[kind]
    expect(verdict.retryable).toBe(false)
    expect(verdict.key).toEqual({ kind: 'cancelled' })
    expect(verdict.status).toBe(rule.status)
    expect(verdict.error).toMatchObject({ type: rule.errorType, message, status: rule.status })
    expect(verdict.retryAfterMs).toBe(retryAfterMs)
    expect(verdict.overload).toBe(kind === 'rate-limited')
  })

  it('states the status of every way of giving up', () => {
    expect(
      Object.fromEntries(Object.entries(giveUpStatus).map(([kind, rule]) => [kind, rule.status])),
    ).toEqual({
      timeout: 504,
      'upstream-fault': 502,
      overloaded: 529,
      busy: 503,
      'rate-limited': 429,
      cooling: 503,
      'credentials-rejected': 502,
      'no-key': 503,
      'client-request': 'upstream',
      'client-gone': 499,
      'unsendable-body': 400,
      'not-sent': 500,
    })
    expect(Object.isFrozen(giveUpStatus)).toBe(true)
  })

  it('names key ids only, bounded, with a stable code', () => {
    const ids = Array.from({ length: 14 }, (_, i) => `k${i}`)
    const verdict = credentialsRejectedVerdict(ids)
    expect(verdict.error.code).toBe(credentialsRejectedCode)
    expect(verdict.error.message).toContain('k0, k1')
    expect(verdict.error.message).toContain('k9 and 4 more')
    expect(verdict.error.message).not.toContain('k10')
  })

  it('a per-attempt 401/403 says the gateway credentials were rejected, as a 502', () => {
    for (const status of [401, 403]) {
      const verdict = classifyAttemptFailure({
        kind: 'status',
        status,
        headers: new Headers(),
        error: errorFromBody(
          '{"error":{"type":"authentication_error","message":"invalid x-api-key"}}',
          status,
        ),
      })
      expect(verdict).toMatchObject({
        retryable: true,
        key: { kind: 'auth-failed', status },
        status: 502,
        error: {
          type: 'upstream_error',
          code: credentialsRejectedCode,
          message: `the upstream rejected the gateway's credentials (${status})`,
        },
      })
    }
  })
})

describe('other give-up statuses follow the table', () => {
  const peek = { frames: [], reader: {} as never, tracker: {} as never, elapsedMs: 1 }
  it('timeouts are 504, empty streams and connection failures 502, client errors pass through', () => {
    const timeout = classifyAttemptFailure({
      kind: 'peek',
      outcome: {
        ...peek,
        kind: 'first-byte-timeout',
        error: { timeoutMs: 10 } as never,
        partialFrameBytes: 0,
      },
    })
    expect(timeout.status).toBe(giveUpStatus.timeout.status)
    expect(timeout.error.type).toBe(giveUpStatus.timeout.errorType)
    const empty = classifyAttemptFailure({
      kind: 'peek',
      outcome: { ...peek, kind: 'empty', eof: { kind: 'empty' } },
    })
    expect(empty.status).toBe(giveUpStatus['upstream-fault'].status)
    const reset = classifyAttemptFailure({
      kind: 'connection',
      error: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
    })
    expect(reset.status).toBe(giveUpStatus['upstream-fault'].status)
    for (const status of [400, 404, 413, 422]) {
      const verdict = classifyAttemptFailure({
        kind: 'status',
        status,
        headers: new Headers(),
        error: errorFromBody('{"error":{"type":"invalid_request_error","message":"bad"}}', status),
      })
      expect(verdict).toMatchObject({
        retryable: false,
        key: { kind: 'rejected' },
        status,
        error: { type: 'invalid_request_error', message: 'bad' },
      })
    }
  })
})

describe('relay: a proxy page served with 200', () => {
  const page: Behaviour = { headers: { 'content-type': 'text/html' }, steps: [{ bytes: nginx }] }
  const ids = ['a', 'b']

  async function run(script: Behaviour[], adapter: StreamAdapter = openaiChat) {
    const sink = createRecordingSink()
    const pool = createMemoryKeyPool(
      ids.map((id) => ({ id, secret: `sk-secret-${id}-0123456789` })),
    )
    const upstream = scriptedUpstream(script)
    const outcome = await relay({
      sink,
      pool,
      adapter,
      attempt: upstream.attempt,
      policy: { maxAttempts: 2, backoff: { baseMs: 1 } },
    })
    const stats = await pool.stats()
    return { sink, outcome, stats, calls: upstream.calls }
  }

  it('is retried with another key and then gives up 502 with the page title, keys not rejected', async () => {
    const { sink, outcome, stats } = await run([page, page])
    expect(outcome).toMatchObject({ kind: 'failed', status: 502, reason: 'not-sse' })
    expect(outcome.attempts.map((a) => a.keyId)).toEqual(['a', 'b'])
    expect(sink.status).toBe(502)
    expect(JSON.parse(sink.text)).toMatchObject({
      error: { type: 'upstream_error', message: '502 Bad Gateway' },
    })
    for (const key of stats) {
      expect(key.outcomes['protocol-fault']).toBe(1)
      expect(key.outcomes.rejected).toBe(0)
      expect(key.outcomes['server-error']).toBe(0)
    }
  })

  it("answers in the protocol's own error shape (Anthropic)", async () => {
    const { sink, outcome } = await run([page, page], anthropicMessages)
    expect(outcome).toMatchObject({ kind: 'failed', status: 502 })
    expect(JSON.parse(sink.text)).toMatchObject({
      type: 'error',
      error: { type: 'api_error', message: '502 Bad Gateway' },
    })
  })

  it('is followed by a clean stream when the next attempt succeeds', async () => {
    const { sink, outcome, calls } = await run([
      page,
      { steps: [{ bytes: fixtureBytes('openai-chat/text.sse') }] },
    ])
    expect(outcome.kind).toBe('committed')
    expect(calls.every((c) => c.body?.released)).toBe(true)
    expect(sink.status).toBe(200)
  })
})
