import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { anthropicDownstream } from '../../examples/anthropic-over-openai-gateway.js'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  type KeyPool,
  openaiChat,
  openaiChatWith,
  type RelayHooks,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  type StreamAdapter,
  webSink,
} from '../../src/index.js'
import { clientSignal, nodeSink } from '../../src/node.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { prefillOf, restAfter } from '../../src/testing/prefill.js'
import { wireFor } from '../../src/testing/wire.js'
import { leaseTotals } from '../support/leases.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * Where a continuation must not happen (tool arguments open, thinking, no adapter support),
 * where it fails, and where user code misbehaves: the client gets the honest error it gets
 * without continuation, every lease is reported once, and `onOutcome` is called once.
 * Twins: `createResilientFetch` and `relay()` behind `node:http`.
 */

const { listen } = useLoopback()
const answer = 'The quick brown fox jumps over the lazy dog.'
const sse = { 'content-type': 'text/event-stream' }

/** An upstream whose first request streams `first` and stops; a continuation gets the rest. */
function scripted(adapter: StreamAdapter, first: string, rest?: () => Response) {
  const bodies: string[] = []
  const fetch = async (_input: string | URL | Request, init?: RequestInit) => {
    const text = typeof init?.body === 'string' ? init.body : ''
    bodies.push(text)
    if (bodies.length === 1) return new Response(first, { headers: sse })
    if (rest !== undefined) return rest()
    const prefill = prefillOf(adapter, text) ?? ''
    const wire = wireFor(adapter)
    const frames = [
      ...wire.start(),
      ...wire.text(restAfter(prefill, [answer]) ?? '!!'),
      ...wire.finish('stop'),
    ]
    return new Response(frames.join(''), { headers: sse })
  }
  return { fetch, bodies }
}

async function through(
  adapter: StreamAdapter,
  fetch: typeof globalThis.fetch,
  policy: RelayPolicy = {},
  hooks: RelayHooks = {},
  secrets = ['sk-edge-a-1234567890', 'sk-edge-b-1234567890'],
) {
  const pool = createMemoryKeyPool(
    secrets.map((secret, i) => ({ id: String.fromCharCode(97 + i), secret })),
  )
  const outcomes: RelayOutcome[] = []
  const wrapped = createResilientFetch({
    fetch,
    pool,
    adapter,
    hooks,
    policy: { continueAfterCut: true, backoff: { baseMs: 1 }, ...policy },
    onOutcome: (o) => outcomes.push(o),
  })
  return { pool, outcomes, fetch: wrapped }
}

async function settled(pool: KeyPool, outcomes: readonly RelayOutcome[]) {
  for (let i = 0; i < 100; i++) {
    const totals = await leaseTotals(pool)
    if (totals.inflight === 0 && totals.reported === totals.leased && outcomes.length > 0) break
    await new Promise((resolve) => setTimeout(resolve, 2))
  }
  return leaseTotals(pool)
}

async function anthropicText(fetch: typeof globalThis.fetch, extra: Record<string, unknown> = {}) {
  const client = new Anthropic({ apiKey: 'sk-x', baseURL: 'http://up.test', fetch, maxRetries: 0 })
  const message = await client.messages
    .stream({
      model: 'c',
      max_tokens: 2048,
      messages: [{ role: 'user', content: 'hi' }],
      ...extra,
    } as Anthropic.MessageStreamParams)
    .finalMessage()
  return message.content.map((b) => (b.type === 'text' ? b.text : '')).join('')
}

/** The answer text the official OpenAI SDK reads from a Chat stream through `fetch`. */
async function chatText(fetch: typeof globalThis.fetch) {
  const client = new OpenAI({ apiKey: 'sk-x', baseURL: 'http://up.test/v1', fetch, maxRetries: 0 })
  const completion = await client.chat.completions
    .stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
    .finalChatCompletion()
  return completion.choices[0]?.message.content ?? ''
}

const anthropicWire = () => wireFor(anthropicMessages)

describe('continueAfterCut: not sound, the honest error', () => {
  it('tool arguments open (Anthropic): no continuation request, the honest error, leases once', async () => {
    const wire = anthropicWire()
    const first = [
      ...wire.start(),
      ...wire.text('Let me look. '),
      ...wire.tool('lookup', ['{"q":', '"fox"']).slice(0, -1),
    ].join('')
    const upstream = scripted(anthropicMessages, first)
    const { pool, outcomes, fetch } = await through(anthropicMessages, upstream.fetch)
    await expect(anthropicText(fetch)).rejects.toThrow(/incomplete/)
    expect(upstream.bodies).toHaveLength(1)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 1, reported: 1 })
    expect(outcomes).toHaveLength(1)
    expect(outcomes[0]).toMatchObject({
      kind: 'committed',
      end: { kind: 'error-written', cause: 'partial-eof' },
      continuations: [{ result: 'not-sound', attempts: 0, receivedChars: 13 }],
    })
  })

  it('tool arguments open (Chat, a dialect): the honest error', async () => {
    const adapter = openaiChatWith({ continuation: 'deepseek-prefix' })
    const wire = wireFor(adapter)
    const first = [...wire.start(), ...wire.text('Let me look. '), ...wire.tool('f', ['{"q":'])]
    const upstream = scripted(adapter, first.join(''))
    const { fetch } = await through(adapter, upstream.fetch)
    await expect(chatText(fetch)).rejects.toThrow(/incomplete/)
    expect(upstream.bodies).toHaveLength(1)
  })

  it('extended thinking on in the request (Anthropic forbids a prefill then): the honest error', async () => {
    const wire = anthropicWire()
    const upstream = scripted(
      anthropicMessages,
      [...wire.start(), ...wire.text('The quick ')].join(''),
    )
    const { pool, outcomes, fetch } = await through(anthropicMessages, upstream.fetch)
    await expect(
      anthropicText(fetch, { thinking: { type: 'enabled', budget_tokens: 1024 } }),
    ).rejects.toThrow(/incomplete/)
    expect(upstream.bodies).toHaveLength(1)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 1, reported: 1 })
    expect(outcomes[0]).toMatchObject({ continuations: [{ result: 'not-sound' }] })
  })

  it('a thinking block before the text: the honest error', async () => {
    const wire = anthropicWire()
    const first = [...wire.start(), ...wire.reasoning('Hmm. '), ...wire.text('The quick ')]
    const upstream = scripted(anthropicMessages, first.join(''))
    const { fetch } = await through(anthropicMessages, upstream.fetch)
    await expect(anthropicText(fetch)).rejects.toThrow(/incomplete/)
    expect(upstream.bodies).toHaveLength(1)
  })

  it('createResilientFetch({ adapter: openaiChat }) without a dialect cannot continue: refused when the fetch is made, naming the dialects', async () => {
    const wire = wireFor(openaiChat)
    const upstream = scripted(openaiChat, [...wire.start(), ...wire.text('The quick ')].join(''))
    await expect(through(openaiChat, upstream.fetch)).rejects.toThrow(
      /continueAfterCut is on but no upstream adapter can continue.*openaiChatWith/,
    )
    expect(upstream.bodies).toHaveLength(0)
  })

  it('continuation off (the default): the honest error', async () => {
    const wire = anthropicWire()
    const upstream = scripted(anthropicMessages, [...wire.start(), ...wire.text('The ')].join(''))
    const { fetch } = await through(anthropicMessages, upstream.fetch, {
      continueAfterCut: false,
    })
    await expect(anthropicText(fetch)).rejects.toThrow(/incomplete/)
    expect(upstream.bodies).toHaveLength(1)
  })
})

describe('continueAfterCut: a continuation that fails', () => {
  it('overloaded on every continuation attempt: the honest error, each lease reported once', async () => {
    const wire = anthropicWire()
    const upstream = scripted(
      anthropicMessages,
      [...wire.start(), ...wire.text('The quick ')].join(''),
      () =>
        new Response('{"type":"error","error":{"type":"overloaded_error","message":"busy"}}', {
          status: 529,
          headers: { 'content-type': 'application/json' },
        }),
    )
    const continued: string[] = []
    const { pool, outcomes, fetch } = await through(
      anthropicMessages,
      upstream.fetch,
      { continueAfterCut: { maxAttempts: 2 } },
      { onContinuation: (context) => continued.push(context.result) },
    )
    await expect(anthropicText(fetch)).rejects.toThrow(/incomplete/)
    expect(upstream.bodies).toHaveLength(3)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 3, reported: 3 })
    expect(continued).toEqual(['failed'])
    expect(outcomes[0]).toMatchObject({ continuations: [{ result: 'failed', attempts: 2 }] })
  })

  it("a continuation's own pre-output fault (an empty stream, a 529) is retried within its budget", async () => {
    for (const fault of ['empty', 'overloaded', 'headers-then-hang'] as const) {
      const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', fault, 'ok'] } })
      const { pool, outcomes, fetch } = await through(
        anthropicMessages,
        (input, init) =>
          upstream.fetch(input, {
            ...init,
            headers: { ...Object.fromEntries(new Headers(init?.headers)), 'x-fault-scenario': 's' },
          }),
        { peek: { firstByteTimeoutMs: 100 } },
      )
      expect(await anthropicText(fetch), fault).toBe(answer)
      expect(upstream.requests).toHaveLength(3)
      expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 3, reported: 3 })
      expect(outcomes[0]).toMatchObject({
        end: { kind: 'completed' },
        continuations: [{ result: 'spliced', attempts: 2 }],
      })
      await upstream.close()
    }
  })

  it('a continuation cut again is continued again, up to maxContinuations', async () => {
    const upstream = createFaultyUpstream({
      scenarios: { s: ['partial-then-cut', 'partial-then-cut', 'ok'] },
    })
    const { pool, outcomes, fetch } = await through(
      anthropicMessages,
      (input, init) =>
        upstream.fetch(input, {
          ...init,
          headers: { ...Object.fromEntries(new Headers(init?.headers)), 'x-fault-scenario': 's' },
        }),
      { continueAfterCut: { maxContinuations: 2 } },
    )
    expect(await anthropicText(fetch)).toBe(answer)
    expect(upstream.requests).toHaveLength(3)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 3, reported: 3 })
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'completed' },
      continuations: [{ result: 'spliced' }, { result: 'spliced' }],
    })
  })

  it("a cut after maxContinuations is recorded 'exhausted', not 'not-sound'", async () => {
    const upstream = createFaultyUpstream({
      scenarios: { s: ['partial-then-cut', 'partial-then-cut', 'ok'] },
    })
    const { pool, outcomes, fetch } = await through(
      anthropicMessages,
      (input, init) =>
        upstream.fetch(input, {
          ...init,
          headers: { ...Object.fromEntries(new Headers(init?.headers)), 'x-fault-scenario': 's' },
        }),
      { continueAfterCut: { maxContinuations: 1 } },
    )
    await expect(anthropicText(fetch)).rejects.toThrow()
    expect(upstream.requests).toHaveLength(2)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 2, reported: 2 })
    expect(outcomes[0]).toMatchObject({
      continuations: [{ result: 'spliced' }, { result: 'exhausted', attempts: 0, keyId: null }],
    })
  })

  it('an upstream gone silent after output (the idle timeout) is continued', async () => {
    const upstream = createFaultyUpstream({
      scenarios: { s: [{ kind: 'slow-drip', delayMs: 400 }, 'ok'] },
    })
    const { outcomes, fetch } = await through(
      anthropicMessages,
      (input, init) =>
        upstream.fetch(input, {
          ...init,
          headers: { ...Object.fromEntries(new Headers(init?.headers)), 'x-fault-scenario': 's' },
        }),
      { idleTimeoutMs: 150 },
    )
    expect(await anthropicText(fetch)).toBe(answer)
    await upstream.close()
    for (let i = 0; i < 50 && outcomes.length === 0; i++) await new Promise((r) => setTimeout(r, 5))
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'completed' },
      continuations: [{ result: 'spliced', cause: 'idle-timeout' }],
    })
  })
})

describe('continueAfterCut: a continuation that restarts is never appended', () => {
  /** An upstream whose continuation writes `deltas`, whatever the request asked. */
  function continuingWith(deltas: readonly string[]) {
    const wire = anthropicWire()
    const first = [...wire.start(), ...wire.text('The quick')].join('')
    return scripted(anthropicMessages, first, () => {
      const next = anthropicWire()
      const frames = [
        ...next.start(),
        ...deltas.flatMap((d) => next.text(d)),
        ...next.finish('stop'),
      ]
      return new Response(frames.join(''), { headers: sse })
    })
  }

  it('createResilientFetch behind a proxy that drops the prefill: the restart is never appended', async () => {
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    let original: BodyInit | null | undefined
    const continued: string[] = []
    const { pool, outcomes, fetch } = await through(
      anthropicMessages,
      (input, init) => {
        original ??= init?.body
        return upstream.fetch(input, {
          ...init,
          body: original ?? null,
          headers: { ...Object.fromEntries(new Headers(init?.headers)), 'x-fault-scenario': 's' },
        })
      },
      {},
      { onContinuation: (context) => continued.push(context.result) },
    )
    await expect(anthropicText(fetch)).rejects.toThrow(/incomplete/)
    expect(continued).toEqual(['restarted'])
    expect(upstream.requests).toHaveLength(2)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 2, reported: 2 })
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'error-written' },
      continuations: [{ result: 'restarted' }],
    })
    const stats = await pool.stats()
    // The restarted continuation's key is not blamed: its lease ends as cancelled.
    expect(stats.reduce((n, each) => n + each.outcomes.cancelled, 0)).toBe(1)
    await upstream.close()
  })

  it('a continuation that begins like the received text and then differs is held, then sent whole', async () => {
    const upstream = continuingWith(['Th', 'ey', ' said.'])
    const { outcomes, fetch } = await through(anthropicMessages, upstream.fetch)
    expect(await anthropicText(fetch)).toBe('The quickThey said.')
    await new Promise((resolve) => setTimeout(resolve, 10))
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'completed' },
      continuations: [{ result: 'spliced' }],
    })
  })

  it('a continuation that ends while it still repeats the received text is treated as absent', async () => {
    const upstream = continuingWith(['The', ' qu'])
    const { pool, outcomes, fetch } = await through(anthropicMessages, upstream.fetch)
    await expect(anthropicText(fetch)).rejects.toThrow(/incomplete/)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 2, reported: 2 })
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'error-written' },
      continuations: [{ result: 'restarted' }],
    })
  })

  it('a continuation that repeats the start of the received text and then goes silent: held within its budget, then the honest error', async () => {
    const wire = anthropicWire()
    const next = anthropicWire()
    let cancelled = false
    const upstream = scripted(
      anthropicMessages,
      [...wire.start(), ...wire.text('The quick')].join(''),
      () => {
        const head = new TextEncoder().encode([...next.start(), ...next.text('The')].join(''))
        let sent = false
        const body = new ReadableStream<Uint8Array>({
          pull(controller) {
            if (!sent) {
              sent = true
              controller.enqueue(head)
            }
            return new Promise(() => {})
          },
          cancel() {
            cancelled = true
          },
        })
        return new Response(body, { headers: sse })
      },
    )
    const { pool, outcomes, fetch } = await through(anthropicMessages, upstream.fetch, {
      continueAfterCut: { timeoutMs: 150 },
    })
    const started = performance.now()
    await expect(anthropicText(fetch)).rejects.toThrow(/incomplete/)
    expect(performance.now() - started).toBeLessThan(2000)
    expect(cancelled).toBe(true)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 2, reported: 2 })
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'error-written' },
      continuations: [{ result: 'failed', attempts: 1 }],
    })
  })

  it('a restart that repeats the received text in one delta and goes on is never appended', async () => {
    const upstream = continuingWith(['The quick brown fox.'])
    const { fetch } = await through(anthropicMessages, upstream.fetch)
    await expect(anthropicText(fetch)).rejects.toThrow(/incomplete/)
  })
})

describe('continueAfterCut: the idle timeout without a sound continuation', () => {
  it('a silent upstream after tool output: the honest timeout error, as without continuation', async () => {
    const upstream = createFaultyUpstream({
      scenarios: { s: [{ kind: 'slow-drip', delayMs: 400 }, 'ok'] },
    })
    const adapter = { ...anthropicMessages, buildContinuation: () => null } as StreamAdapter
    const { pool, outcomes, fetch } = await through(
      adapter,
      (input, init) =>
        upstream.fetch(input, {
          ...init,
          headers: { ...Object.fromEntries(new Headers(init?.headers)), 'x-fault-scenario': 's' },
        }),
      { idleTimeoutMs: 150 },
    )
    await expect(anthropicText(fetch)).rejects.toThrow(/150 ms|idle|timed out/i)
    await upstream.close()
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 1, reported: 1 })
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'error-written', cause: 'idle-timeout' },
      continuations: [{ result: 'not-sound', cause: 'idle-timeout' }],
    })
  })
})

describe('continueAfterCut: credentials stay home (invariant 17)', () => {
  it('an error frame of the continuation quoting its key reaches the client redacted', async () => {
    const wire = anthropicWire()
    const next = anthropicWire()
    // Secrets no pattern would catch: only redaction by value hides them.
    const secrets = ['plainAlphaSecret0001', 'plainBravoSecret0002']
    const leak = `bad keys: ${secrets.join(' ')}`
    const upstream = scripted(
      anthropicMessages,
      [...wire.start(), ...wire.text('The quick ')].join(''),
      () =>
        new Response(
          [
            ...next.start(),
            ...next.text('brown '),
            `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: leak } })}\n\n`,
          ].join(''),
          { headers: sse },
        ),
    )
    const { pool, outcomes, fetch } = await through(
      anthropicMessages,
      upstream.fetch,
      {},
      {},
      secrets,
    )
    const failure = await anthropicText(fetch).then(
      () => undefined,
      (error: unknown) => error,
    )
    expect(String(failure)).toMatch(/bad keys/)
    expect(String(failure)).not.toMatch(/plain(Alpha|Bravo)Secret/)
    expect(upstream.bodies).toHaveLength(2)
    await settled(pool, outcomes)
    expect(JSON.stringify(outcomes)).not.toMatch(/plain(Alpha|Bravo)Secret/)
  })
})

describe('continueAfterCut: hostile user code still gets a settled honest answer', () => {
  const hostile: [string, Partial<StreamAdapter>][] = [
    [
      'buildContinuation throws',
      {
        buildContinuation: () => {
          throw new Error('boom')
        },
      },
    ],
    ['buildContinuation returns a string', { buildContinuation: () => 'garbage' as never }],
    ['buildContinuation returns a body-less object', { buildContinuation: () => ({}) as never }],
    [
      'spliceContinuation throws',
      {
        spliceContinuation: () => {
          throw new Error('boom')
        },
      },
    ],
    ['spliceContinuation returns no function', { spliceContinuation: () => 42 as never }],
    [
      'the splice throws on a frame',
      {
        spliceContinuation: () => () => {
          throw new Error('boom')
        },
      },
    ],
    ['the splice returns garbage', { spliceContinuation: () => () => 'x' as never }],
  ]
  for (const [name, members] of hostile) {
    it(name, async () => {
      const adapter = { ...anthropicMessages, ...members } as StreamAdapter
      const wire = anthropicWire()
      const upstream = scripted(adapter, [...wire.start(), ...wire.text('The quick ')].join(''))
      const { pool, outcomes, fetch } = await through(adapter, upstream.fetch)
      await expect(anthropicText(fetch)).rejects.toThrow(/incomplete|spliced/)
      const totals = await settled(pool, outcomes)
      expect(totals.inflight).toBe(0)
      expect(totals.reported).toBe(totals.leased)
      expect(outcomes).toHaveLength(1)
      expect(outcomes[0]).toMatchObject({ kind: 'committed', end: { kind: 'error-written' } })
    })
  }
})

describe('continueAfterCut twins', () => {
  async function viaNodeHttp(
    scenario: Scenario,
    sends: 'context.request' | 'its own body' = 'context.request',
  ) {
    const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
    const pool = createMemoryKeyPool([
      { id: 'a', secret: 'sk-twin-a-1234567890' },
      { id: 'b', secret: 'sk-twin-b-1234567890' },
    ])
    const outcomes: RelayOutcome[] = []
    const server = createServer((req, res) => {
      withBody(req, async (text) => {
        const body = JSON.parse(text) as Record<string, unknown>
        const sent = (request: { body: unknown } | undefined) =>
          sends === 'context.request' ? JSON.stringify(request?.body) : text
        outcomes.push(
          await relay({
            sink: nodeSink(res),
            signal: clientSignal(req, res),
            pool,
            adapter: anthropicMessages,
            request: { url: 'http://upstream.test/v1/messages', body },
            policy: { continueAfterCut: true, backoff: { baseMs: 1 } },
            attempt: ({ key, signal, request }) =>
              upstream.fetch(request?.url ?? 'http://upstream.test/v1/messages', {
                method: 'POST',
                headers: { 'x-api-key': key.secret, 'x-fault-scenario': 's' },
                body: sent(request),
                signal,
              }),
          }),
        )
      })
    })
    const url = await listen(server)
    return { url, upstream, pool, outcomes }
  }

  it('relay() behind node:http: partial-then-cut reaches the Anthropic SDK whole', async () => {
    const { url, upstream, pool, outcomes } = await viaNodeHttp(['partial-then-cut', 'ok'])
    const client = new Anthropic({ apiKey: 'sk-x', baseURL: url, maxRetries: 0 })
    const message = await client.messages
      .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    expect(message.content).toEqual([{ type: 'text', text: answer }])
    expect(upstream.requests).toHaveLength(2)
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 2, reported: 2 })
    expect(outcomes[0]).toMatchObject({ continuations: [{ result: 'spliced' }] })
  })

  it('relay() behind node:http: a cut after the text block closed, whitespace at its end, leaves no empty block', async () => {
    // The case: "Hello ", "world \n", content_block_stop, a clean EOF; the prefill is
    // "Hello world" and the continuation writes " \n".
    const wire = anthropicWire()
    const first = [
      ...wire.start(),
      ...wire.text('Hello '),
      ...wire.text('world \n'),
      wire.finish('stop')[0],
    ].join('')
    const bodies: string[] = []
    const pool = createMemoryKeyPool([
      { id: 'a', secret: 'sk-twin-a-1234567890' },
      { id: 'b', secret: 'sk-twin-b-1234567890' },
    ])
    const outcomes: RelayOutcome[] = []
    const server = createServer((req, res) => {
      withBody(req, async (text) => {
        outcomes.push(
          await relay({
            sink: nodeSink(res),
            signal: clientSignal(req, res),
            pool,
            adapter: anthropicMessages,
            request: { url: 'http://upstream.test/v1/messages', body: JSON.parse(text) },
            policy: { continueAfterCut: true, backoff: { baseMs: 1 } },
            attempt: async ({ request }) => {
              const sent = JSON.stringify(request?.body)
              bodies.push(sent)
              if (bodies.length === 1) return new Response(first, { headers: sse })
              const next = anthropicWire()
              const rest = restAfter(prefillOf(anthropicMessages, sent) ?? '', ['Hello world \n'])
              const frames = [...next.start(), ...next.text(rest ?? '!!'), ...next.finish('stop')]
              return new Response(frames.join(''), { headers: sse })
            },
          }),
        )
      })
    })
    const url = await listen(server)
    const client = new Anthropic({ apiKey: 'sk-x', baseURL: url, maxRetries: 0 })
    const stream = client.messages.stream({
      model: 'c',
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    })
    const message = await stream.finalMessage()
    expect(message.content.map((b) => (b.type === 'text' ? b.text : b.type))).toEqual([
      'Hello world \n',
    ])
    expect(await stream.finalText()).toBe('Hello world \n')
    expect(JSON.parse(bodies[1] ?? '{}').messages.at(-1).content).toBe('Hello world')
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 2, reported: 2 })
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'completed' },
      continuations: [{ result: 'spliced' }],
    })
  })

  it('relay() behind node:http, an attempt that sends the body it read (not context.request): the restart is never appended, the honest error instead', async () => {
    const { url, upstream, pool, outcomes } = await viaNodeHttp(
      ['partial-then-cut', 'ok'],
      'its own body',
    )
    const client = new Anthropic({ apiKey: 'sk-x', baseURL: url, maxRetries: 0 })
    const stream = client.messages.stream({
      model: 'c',
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
    })
    let text = ''
    stream.on('text', (delta) => {
      text += delta
    })
    await expect(stream.finalMessage()).rejects.toThrow(/incomplete/)
    // Today's failure was "The quick brown fox The quick brown fox jumps over the lazy dog."
    expect(text).toBe('The quick brown fox ')
    expect(upstream.requests).toHaveLength(2)
    expect(JSON.parse(upstream.requests[1]?.body ?? '{}').messages.at(-1).role).toBe('user')
    expect(await settled(pool, outcomes)).toEqual({ inflight: 0, leased: 2, reported: 2 })
    expect(outcomes[0]).toMatchObject({
      kind: 'committed',
      end: { kind: 'error-written', cause: 'partial-eof' },
      continuations: [{ result: 'restarted', attempts: 1 }],
    })
  })

  it('relay() behind node:http: eof-mid-frame reaches the Anthropic SDK whole', async () => {
    const { url } = await viaNodeHttp(['eof-mid-frame', 'ok'])
    const client = new Anthropic({ apiKey: 'sk-x', baseURL: url, maxRetries: 0 })
    const message = await client.messages
      .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    expect(message.content.map((b) => (b.type === 'text' ? b.text : ''))).toEqual([answer])
  })
})

describe('continueAfterCut behind a translator', () => {
  for (const form of ['frames', 'stream', 'response', 'per-frame'] as const) {
    it(`Anthropic clients over a vLLM upstream (${form} translator): the cut answer is whole`, async () => {
      const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
      const { sink, response } = webSink()
      const relayed = relay({
        sink,
        adapter: openaiChatWith({ continuation: 'vllm-continue' }),
        request: {
          url: 'http://upstream.test/v1/chat/completions',
          body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
        },
        policy: { continueAfterCut: true, downstream: anthropicDownstream(form) },
        attempt: ({ signal, request }) =>
          upstream.fetch(request?.url ?? '', {
            method: 'POST',
            headers: { 'x-fault-scenario': 's' },
            body: JSON.stringify(request?.body),
            signal,
          }),
      })
      const client = new Anthropic({
        apiKey: 'sk-x',
        maxRetries: 0,
        fetch: async () => response,
      })
      const message = await client.messages
        .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
        .finalMessage()
      expect(message.content.map((b) => (b.type === 'text' ? b.text : '')).join('')).toBe(answer)
      expect(await relayed).toMatchObject({
        end: { kind: 'completed' },
        continuations: [{ result: 'spliced' }],
      })
      expect(upstream.requests).toHaveLength(2)
    })
  }

  it('Anthropic clients over a vLLM upstream, an attempt that sends the body it read: the restart is never appended, the honest error in the client protocol', async () => {
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    const original = { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }
    const { sink, response } = webSink()
    const relayed = relay({
      sink,
      adapter: openaiChatWith({ continuation: 'vllm-continue' }),
      request: { url: 'http://upstream.test/v1/chat/completions', body: original },
      policy: { continueAfterCut: true, downstream: anthropicDownstream('frames') },
      attempt: ({ signal }) =>
        upstream.fetch('http://upstream.test/v1/chat/completions', {
          method: 'POST',
          headers: { 'x-fault-scenario': 's' },
          body: JSON.stringify(original),
          signal,
        }),
    })
    const client = new Anthropic({ apiKey: 'sk-x', maxRetries: 0, fetch: async () => response })
    let text = ''
    const stream = client.messages
      .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .on('text', (delta) => {
        text += delta
      })
    await expect(stream.finalMessage()).rejects.toThrow()
    expect(text).toBe('The quick brown fox ')
    expect(await relayed).toMatchObject({
      end: { kind: 'error-written' },
      continuations: [{ result: 'restarted' }],
    })
  })
})
