import { describe, expect, it } from 'vitest'
import { forwardableHeaders, forwardHeadersDefaults } from '../../src/advanced.js'
import { createCommitGate, type ForwardHeadersPolicy } from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { utf8 } from '../support/sources.js'

/** What an OpenAI or Anthropic upstream answers with, one entry per header family. */
const upstream: readonly (readonly [family: string, name: string, value: string])[] = [
  ['account id', 'openai-organization', 'org-abc123'],
  ['account id', 'openai-project', 'proj_abc123'],
  ['account id', 'anthropic-organization-id', 'a1b2c3d4-0000-4000-8000-000000000000'],
  ['rate limit', 'x-ratelimit-remaining-requests', '499'],
  ['rate limit', 'x-ratelimit-reset-tokens', '6m0s'],
  ['rate limit', 'anthropic-ratelimit-requests-remaining', '49'],
  ['rate limit', 'anthropic-ratelimit-tokens-reset', '2026-01-01T00:00:00Z'],
  ['request id', 'x-request-id', 'req_abc'],
  ['request id', 'request-id', 'req_01anthropic'],
  ['request id', 'openai-processing-ms', '412'],
  ['retry hint', 'retry-after', '3'],
  ['cookie', 'set-cookie', '__cf_bm=abc; path=/; HttpOnly'],
  ['cookie', 'cookie', 'session=abc'],
  ['credential', 'authorization', 'Bearer gw-echoed-0123456789'],
  ['credential', 'x-api-key', 'gw-echoed-0123456789'],
  ['credential', 'x-goog-api-key', 'gw-echoed-0123456789'],
  ['credential', 'api-key', 'gw-echoed-0123456789'],
  ['credential', 'proxy-authorization', 'Basic Z3c6ZWNob2Vk'],
  ['hop-by-hop', 'connection', 'keep-alive, x-hop'],
  ['hop-by-hop', 'keep-alive', 'timeout=5'],
  ['hop-by-hop', 'transfer-encoding', 'chunked'],
  ['hop-by-hop', 'x-hop', 'named by connection'],
  ['framing', 'content-length', '1234'],
  ['framing', 'content-encoding', 'gzip'],
  ['other', 'openai-model', 'gpt-4o-2024-08-06'],
  ['other', 'cf-ray', '8f0000000000-AMS'],
]

function upstreamHeaders(): Headers {
  const headers = new Headers()
  for (const [, name, value] of upstream) headers.append(name, value)
  return headers
}

/** Which families pass, per policy (`true`: every header of the family passes). */
const expectations: readonly {
  readonly policy: ForwardHeadersPolicy | undefined
  readonly label: string
  readonly passes: readonly string[]
}[] = [
  {
    policy: undefined,
    label: 'the default',
    passes: ['x-request-id', 'request-id', 'openai-processing-ms', 'retry-after'],
  },
  {
    policy: forwardHeadersDefaults,
    label: 'the defaults object, passed explicitly',
    passes: ['x-request-id', 'request-id', 'openai-processing-ms', 'retry-after'],
  },
  {
    policy: { rateLimit: true },
    label: 'rateLimit: true',
    passes: [
      'x-ratelimit-remaining-requests',
      'x-ratelimit-reset-tokens',
      'anthropic-ratelimit-requests-remaining',
      'anthropic-ratelimit-tokens-reset',
      'x-request-id',
      'request-id',
      'openai-processing-ms',
      'retry-after',
    ],
  },
  {
    policy: { allow: ['X-Request-Id', /^openai-/] },
    label: 'a custom allow list (replaces the default one)',
    passes: [
      'openai-organization',
      'openai-project',
      'x-request-id',
      'openai-processing-ms',
      'openai-model',
    ],
  },
  {
    policy: { allow: [...forwardHeadersDefaults.allow, 'cf-ray'], rateLimit: false },
    label: 'the default list extended',
    passes: ['x-request-id', 'request-id', 'openai-processing-ms', 'retry-after', 'cf-ray'],
  },
  { policy: 'none', label: "'none'", passes: [] },
  {
    policy: () => true,
    label: 'a function allowing everything (still no cookies, credentials, hop-by-hop or framing)',
    passes: upstream
      .filter(([family]) => !['cookie', 'credential', 'hop-by-hop', 'framing'].includes(family))
      .map(([, name]) => name),
  },
]

describe('forwardableHeaders', () => {
  it.each(expectations)(
    'passes on exactly the expected header families under $label',
    ({ policy, passes }) => {
      const out = forwardableHeaders(upstreamHeaders(), policy)
      expect([...out.keys()].sort()).toEqual([...passes].sort())
      for (const name of passes) {
        expect(out.get(name)).toBe(upstream.find(([, n]) => n === name)?.[2])
      }
    },
  )

  it('never passes an upstream account identifier by default', () => {
    const out = forwardableHeaders(upstreamHeaders())
    for (const [family, name] of upstream) {
      if (family === 'account id' || family === 'rate limit') expect(out.has(name)).toBe(false)
    }
  })

  it('redacts each value it passes on: the given secrets by value, keys by shape', () => {
    const secret = 'gw-key-0123456789'
    const out = forwardableHeaders(
      new Headers({
        'x-request-id': `req_${secret}`,
        'request-id': 'req_sk-proj-abcdefghijklmnop',
        'x-trace': `id=AIza${'x'.repeat(35)}`,
        'cf-ray': 'task-abcdefghijkl',
      }),
      () => true,
      [secret],
    )
    expect(Object.fromEntries(out)).toEqual({
      'x-request-id': 'req_[redacted]',
      'request-id': 'req_[redacted]',
      'x-trace': 'id=[redacted]',
      // A word that ends in `sk-` is no key.
      'cf-ray': 'task-abcdefghijkl',
    })
  })

  it('hands a function policy each lower-case name with its value', () => {
    const seen: [string, string][] = []
    forwardableHeaders(
      new Headers({ 'X-Request-Id': 'r1', 'Set-Cookie': 'a=b' }),
      (name, value) => {
        seen.push([name, value])
        return false
      },
    )
    expect(seen).toEqual([['x-request-id', 'r1']])
  })

  it('matches a global RegExp on every header, not every other one', () => {
    const out = forwardableHeaders(new Headers({ 'x-a-1': '1', 'x-a-2': '2', 'x-a-3': '3' }), {
      allow: [/^x-a-/g],
    })
    expect([...out.keys()]).toEqual(['x-a-1', 'x-a-2', 'x-a-3'])
  })

  it.each([
    [{ allow: [42] }, 'forwardHeaders.allow[0] must be a header name or a RegExp, got 42'],
    [
      { allow: ['ok', 'bad name'] },
      'forwardHeaders.allow[1] must be a header name or a RegExp, got "bad name"',
    ],
    [{ allow: 'x-request-id' }, 'forwardHeaders.allow must be an array of header names or RegExps'],
    [{ rateLimit: 'yes' }, 'forwardHeaders.rateLimit must be a boolean, got yes'],
    ['all', "forwardHeaders must be 'none', a function or { allow, rateLimit }, got all"],
  ])('rejects a malformed policy %j with an exact message', (policy, message) => {
    expect(() =>
      forwardableHeaders(new Headers(), policy as unknown as ForwardHeadersPolicy),
    ).toThrow(message)
  })
})

describe('createCommitGate({ forwardHeaders })', () => {
  async function headOf(policy: ForwardHeadersPolicy | undefined) {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, {
      keepAliveIntervalMs: Number.POSITIVE_INFINITY,
      headers: { 'x-gateway': 'g1' },
      ...(policy === undefined ? {} : { forwardHeaders: policy }),
    })
    gate.setUpstreamHeaders(upstreamHeaders())
    await gate.write(utf8('data: x\n\n'))
    await gate.close()
    const head = sink.events[0]
    if (head?.type !== 'head') throw new Error('no head was sent')
    return Object.fromEntries(head.headers)
  }

  it('sends only the allowed upstream headers by default, under the SSE and host headers', async () => {
    expect(await headOf(undefined)).toEqual({
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
      'x-gateway': 'g1',
      'x-request-id': 'req_abc',
      'request-id': 'req_01anthropic',
      'openai-processing-ms': '412',
      'retry-after': '3',
    })
  })

  it('follows the policy it was given', async () => {
    const head = await headOf({ allow: [], rateLimit: true })
    expect(
      Object.keys(head)
        .filter((name) => name.includes('ratelimit'))
        .sort(),
    ).toEqual([
      'anthropic-ratelimit-requests-remaining',
      'anthropic-ratelimit-tokens-reset',
      'x-ratelimit-remaining-requests',
      'x-ratelimit-reset-tokens',
    ])
    expect(head['x-request-id']).toBeUndefined()
    expect(head['openai-organization']).toBeUndefined()
  })

  it('redacts the secrets it is given by value from the upstream headers it sends', async () => {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    gate.setUpstreamHeaders(new Headers({ 'x-request-id': 'req_leased-key-0123' }), [
      'leased-key-0123',
    ])
    await gate.write(utf8('data: x\n\n'))
    await gate.close()
    const head = sink.events[0]
    if (head?.type !== 'head') throw new Error('no head was sent')
    expect(head.headers.get('x-request-id')).toBe('req_[redacted]')
  })

  it('rejects a malformed policy when the gate is created', () => {
    expect(() =>
      createCommitGate(createRecordingSink(), {
        forwardHeaders: { allow: [null] } as unknown as ForwardHeadersPolicy,
      }),
    ).toThrow('forwardHeaders.allow[0] must be a header name or a RegExp, got null')
  })
})
