/**
 * Invariant 28, a client's request never blames a key: any failure before a request leaves the
 * process (serialising its body, building its URL or headers, an attempt function that throws
 * before it sends) is the request's failure. One attempt, no upstream request, no cooldown, no
 * circuit, and an honest answer in the client's protocol (400 for a body that cannot be sent as
 * JSON, 500 for the gateway's own failure), on the memory and the Redis pool, with
 * `fetchAttempt`, `nodeHttpAttempt` and a hand-written attempt.
 */

import { createServer } from 'node:http'
import fc from 'fast-check'
import {
  type AttemptFunction,
  anthropicMessages,
  createMemoryKeyPool,
  fetchAttempt,
  type KeyPool,
  openaiChat,
  type PoolKey,
  RequestNotSentError,
  relay,
  type StreamAdapter,
} from 'stream-boundary'
import { classifyAttemptFailure } from 'stream-boundary/advanced'
import { nodeHttpAttempt } from 'stream-boundary/node'
import { createRecordingSink } from 'stream-boundary/testing'
import { describe, expect, it } from 'vitest'
import { useRedisPools } from '../redis/redis-server.js'
import { useLoopback, withBody } from '../support/loopback.js'
import { runs } from '../support/runs.js'

const loopback = useLoopback()
const redisPools = useRedisPools('request-not-sent')

const chatAnswer = [
  'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n',
  'data: [DONE]\n\n',
].join('')

/** An upstream that counts the requests that reached it (none should). */
async function countingUpstream() {
  let received = 0
  const server = createServer((req, res) => {
    withBody(req, () => {
      received++
      res.writeHead(200, { 'content-type': 'text/event-stream' }).end(chatAnswer)
    })
  })
  const url = await loopback.listen(server)
  return { url, received: () => received }
}

/** A body nested `depth` deep, as a client can send it in 12 KB. */
function nested(depth: number): unknown {
  let value: unknown = []
  for (let i = 0; i < depth; i++) value = [value]
  return value
}

/** Bodies `JSON.stringify` cannot serialise. */
const hostileBodies: Record<string, () => Record<string, unknown>> = {
  // 6,000 deep overflows a plain Node process's stack; a test worker's may be larger.
  'nested 200,000 deep': () => ({ model: 'm', stream: true, messages: [], x: nested(200_000) }),
  cyclic: () => {
    const body: Record<string, unknown> = { model: 'm', stream: true, messages: [] }
    body.self = body
    return body
  },
  'a BigInt': () => ({ model: 'm', stream: true, messages: [], n: 10n }),
  'a toJSON that throws': () => ({
    model: 'm',
    stream: true,
    messages: [],
    x: {
      toJSON() {
        throw new Error('not serialisable')
      },
    },
  }),
}

type Transport = 'fetchAttempt' | 'nodeHttpAttempt' | 'hand-written'

/** One way a request fails before it leaves: what the relay is given, and the status expected. */
interface Step {
  readonly name: string
  readonly status: 400 | 500
  readonly transports: readonly Transport[]
  build(
    url: string,
    transport: Transport,
  ): {
    body: Record<string, unknown>
    url: string
    attempt: AttemptFunction
    adapter?: StreamAdapter
  }
}

const ordinary = () => ({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] })

function readyAttempt(transport: Transport, options: { headers?: Record<string, string> } = {}) {
  return (transport === 'nodeHttpAttempt' ? nodeHttpAttempt : fetchAttempt)(
    options,
  ) as AttemptFunction
}

/** A hand-written attempt that throws `error` before it sends anything. */
const throwing =
  (error: () => unknown): AttemptFunction =>
  async () => {
    throw error()
  }

const steps: readonly Step[] = [
  ...Object.entries(hostileBodies).map(
    ([name, body]): Step => ({
      name: `a body with ${name}`,
      status: 400,
      transports: ['fetchAttempt', 'nodeHttpAttempt'],
      build: (url, transport) => ({ body: body(), url, attempt: readyAttempt(transport) }),
    }),
  ),
  {
    name: 'a URL that does not parse',
    status: 500,
    transports: ['fetchAttempt', 'nodeHttpAttempt'],
    build: (_url, transport) => ({
      body: ordinary(),
      url: 'http://exa mple/v1/chat/completions',
      attempt: readyAttempt(transport),
    }),
  },
  {
    name: 'a header value that cannot be sent',
    status: 500,
    transports: ['fetchAttempt', 'nodeHttpAttempt'],
    build: (url, transport) => ({
      body: ordinary(),
      url,
      attempt: readyAttempt(transport, { headers: { 'x-proxy': 'a\r\nb' } }),
    }),
  },
  {
    name: 'an adapter with no credential header',
    status: 500,
    transports: ['fetchAttempt', 'nodeHttpAttempt'],
    build: (url, transport) => {
      const { credentialHeader: _none, ...adapter } = openaiChat
      return { body: ordinary(), url, attempt: readyAttempt(transport), adapter }
    },
  },
  {
    name: 'a hand-written attempt that serialises a deep body itself',
    status: 500,
    transports: ['hand-written'],
    build: (url) => ({
      body: hostileBodies['nested 200,000 deep']?.() ?? {},
      url,
      attempt: async ({ request, signal }) => {
        const sent = JSON.stringify(request?.body)
        return fetch(url, { method: 'POST', body: sent, signal })
      },
    }),
  },
  ...(
    [
      ['TypeError', () => new TypeError("Cannot read properties of undefined (reading 'x')")],
      ['RangeError', () => new RangeError('Invalid array length')],
      ['SyntaxError', () => new SyntaxError('Unexpected token')],
      ['ReferenceError', () => new ReferenceError('x is not defined')],
      [
        "Node's ERR_INVALID_ARG_TYPE",
        () =>
          Object.assign(new TypeError('The "url" argument must be of type string'), {
            code: 'ERR_INVALID_ARG_TYPE',
          }),
      ],
    ] as const
  ).map(
    ([name, error]): Step => ({
      name: `a hand-written attempt that throws a ${name} before it sends`,
      status: 500,
      transports: ['hand-written'],
      build: (url) => ({ body: ordinary(), url, attempt: throwing(error) }),
    }),
  ),
]

const keys = (n: number): PoolKey[] =>
  Array.from({ length: n }, (_, i) => ({ id: `k${i}`, secret: `sk-not-sent-${i}-abcdefghij` }))

/** Sends `requests` requests that fail at `step`; checks each answer and what the pool holds. */
async function check(
  pool: KeyPool,
  keyCount: number,
  step: Step,
  transport: Transport,
  adapter: StreamAdapter,
  stream: boolean,
  maxAttempts: number,
) {
  const upstream = await countingUpstream()
  for (let request = 0; request < 3; request++) {
    const built = step.build(`${upstream.url}/v1/chat/completions`, transport)
    const used = built.adapter ?? adapter
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      pool,
      adapter: used,
      request: { url: built.url, body: { ...built.body, stream } },
      attempt: built.attempt,
      policy: { maxAttempts, backoff: { baseMs: 1, maxMs: 2 } },
    })
    expect(upstream.received()).toBe(0)
    expect(outcome).toMatchObject({ kind: 'failed', status: step.status })
    // No retry on the other keys: the request would fail on every one of them the same way.
    expect(outcome.attempts).toHaveLength(1)
    expect(sink.status).toBe(step.status)
    // In the client's protocol: a JSON error body of its shape.
    const answer = JSON.parse(sink.text) as { error?: { message?: unknown } }
    expect(typeof answer.error?.message).toBe('string')
    // Never the key's secret, nor the thrown error's own words.
    expect(sink.text).not.toMatch(/sk-not-sent|not serialisable|Cannot read/)
  }
  const stats = await pool.stats()
  for (const key of stats) {
    expect(key.inflight).toBe(0)
    expect(key.outcomes['server-error'] + key.outcomes['rate-limited']).toBe(0)
    expect(key.outcomes['auth-failed'] + key.outcomes['protocol-fault']).toBe(0)
  }
  // Every key is still free to lease: no cooldown, no open circuit.
  for (let i = 0; i < keyCount; i++) {
    const others = new Set(keys(keyCount).map((k) => k.id))
    others.delete(`k${i}`)
    const got = await pool.acquire({ exclude: others })
    expect(got.kind).toBe('leased')
    if (got.kind === 'leased') await got.lease.report({ kind: 'cancelled' })
  }
}

const cases = fc.record({
  step: fc.constantFrom(...steps),
  pick: fc.nat(),
  keyCount: fc.integer({ min: 1, max: 3 }),
  adapter: fc.constantFrom(openaiChat, anthropicMessages),
  stream: fc.boolean(),
  maxAttempts: fc.integer({ min: 1, max: 4 }),
})

describe('invariant 28: a client’s request never blames a key', () => {
  for (const [name, make] of [
    ['memory', (k: PoolKey[]) => createMemoryKeyPool(k)],
    ['Redis', (k: PoolKey[]) => redisPools.pool(k)],
  ] as const) {
    it(`no failure that happens before the request leaves the process counts against a key (${name} pool)`, async () => {
      await fc.assert(
        fc.asyncProperty(cases, async ({ step, pick, keyCount, adapter, stream, maxAttempts }) => {
          const transport = step.transports[pick % step.transports.length] as Transport
          await check(make(keys(keyCount)), keyCount, step, transport, adapter, stream, maxAttempts)
        }),
        { numRuns: runs(name === 'memory' ? 40 : 15) },
      )
    })
  }

  it.each(
    steps.flatMap((step) =>
      step.transports.map((transport) => [step.name, transport, step] as const),
    ),
  )('%s (%s): one attempt, the request’s answer, no key blamed', async (_name, transport, step) => {
    await check(createMemoryKeyPool(keys(2)), 2, step, transport, openaiChat, true, 3)
  })
})

describe('what an attempt function threw: before sending, or the network', () => {
  const network: [string, unknown][] = [
    [
      "undici's fetch failed",
      Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNRESET' } }),
    ],
    ['a bare fetch failed', new TypeError('fetch failed')],
    ["a browser's Failed to fetch", new TypeError('Failed to fetch')],
    ["Deno's connection refused", new TypeError('error sending request: connection refused')],
    ["undici's terminated", new TypeError('terminated')],
    ['an abort', new DOMException('aborted', 'AbortError')],
    ["axios's network error", Object.assign(new Error('Network Error'), { code: 'ERR_NETWORK' })],
    ['an errno code on a TypeError', Object.assign(new TypeError('x'), { code: 'EHOSTUNREACH' })],
  ]
  it.each(network)('%s is a connection failure, judged as before', (_name, error) => {
    expect(classifyAttemptFailure({ kind: 'connection', error }).reason).not.toBe(
      'request-not-sent',
    )
  })

  const notSent: [string, unknown, number][] = [
    ['a RequestNotSentError for the body', new RequestNotSentError('body', 'x'), 400],
    ['a RequestNotSentError for a header', new RequestNotSentError('headers', 'x'), 500],
    [
      'a TypeError from reading undefined',
      new TypeError("Cannot read properties of undefined (reading 'url')"),
      500,
    ],
    ['a RangeError from a deep stringify', new RangeError('Maximum call stack size exceeded'), 500],
    [
      "fetch's URL failure (cause ERR_INVALID_URL)",
      new TypeError('Failed to parse URL from x', {
        cause: Object.assign(new TypeError('Invalid URL'), { code: 'ERR_INVALID_URL' }),
      }),
      500,
    ],
    [
      "node:http's ERR_INVALID_CHAR",
      Object.assign(new TypeError('Invalid character in header content ["x"]'), {
        code: 'ERR_INVALID_CHAR',
      }),
      500,
    ],
    // Thrown values of no error's shape say nothing of a network: the attempt function's own.
    ['a thrown number', 42, 500],
    ['a thrown null', null, 500],
    ['a thrown undefined', undefined, 500],
    ['a thrown symbol', Symbol('x'), 500],
    ['a thrown bare object', Object.create(null), 500],
    [
      'an error whose every field throws when read',
      new Proxy(
        {},
        {
          get() {
            throw new Error('hostile')
          },
          getPrototypeOf() {
            throw new Error('hostile')
          },
        },
      ),
      500,
    ],
  ]
  it.each(notSent)(
    '%s is the request’s failure: not retried, the key not blamed',
    (_name, error, status) => {
      const verdict = classifyAttemptFailure({ kind: 'connection', error })
      expect(verdict).toMatchObject({
        reason: 'request-not-sent',
        retryable: false,
        key: { kind: 'cancelled' },
        status,
      })
    },
  )

  it('a plain Error of unknown shape stays a connection failure (retried)', () => {
    expect(classifyAttemptFailure({ kind: 'connection', error: new Error('boom') })).toMatchObject({
      reason: 'connection-error',
      retryable: true,
    })
  })
})
