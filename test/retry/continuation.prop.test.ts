/**
 * Invariant 20 by property: with `continueAfterCut` on, an answer cut anywhere after its
 * first text (between frames, inside a frame, inside a multi-byte character, after its text
 * block closed; a clean EOF or a reset), ending in whitespace or not, in any chunking,
 * reaches the official SDK whole: no gap, no duplicate, no extra block, a stream it parses;
 * and every lease is reported once.
 *
 * The model's continuation never begins like the answer (the first delta's characters occur
 * nowhere else): a continuation that repeats the received text is a restart, which the relay
 * never appends (the restart property below).
 */

import Anthropic from '@anthropic-ai/sdk'
import fc from 'fast-check'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import type { OpenAIChatContinuation } from '../../src/advanced.js'
import {
  type AttemptFunction,
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  fetchAttempt,
  openaiChatWith,
  type RelayOutcome,
  relay,
  type StreamAdapter,
  webSink,
} from '../../src/index.js'
import { prefillOf, restAfter } from '../../src/testing/prefill.js'
import { wireFor } from '../../src/testing/wire.js'
import { leaseTotals } from '../support/leases.js'
import { runs } from '../support/runs.js'

const encoder = new TextEncoder()

/** Word pieces with multi-byte characters, spaces and newlines: what a model writes. */
const piece = fc
  .array(fc.constantFrom('a', 'Z', 'é', '漢', '🦊', ' ', '\n', '.', '"', '\\'), {
    minLength: 1,
    maxLength: 6,
  })
  .map((chars) => chars.join(''))

/**
 * An answer as its deltas: the first holds a letter (Anthropic cannot prefill whitespace) that
 * no piece holds, so no continuation begins like the answer; whitespace at the end or not.
 */
const deltas = fc
  .tuple(
    fc.constantFrom('Hi', 'Ω', '字', '🐺'),
    fc.array(piece, { minLength: 1, maxLength: 8 }),
    fc.constantFrom('', ' ', ' \n', '\n\n', '\t '),
  )
  .map(([first, rest, tail]) => [first, ...rest, ...(tail === '' ? [] : [tail])])

/** Splits bytes into chunks at the given fractions. */
function chunked(bytes: Uint8Array, cuts: readonly number[]): Uint8Array[] {
  const at = [...new Set(cuts.map((f) => Math.floor(f * bytes.length)))]
    .filter((i) => i > 0 && i < bytes.length)
    .sort((a, b) => a - b)
  const out: Uint8Array[] = []
  let from = 0
  for (const to of [...at, bytes.length]) {
    out.push(bytes.slice(from, to))
    from = to
  }
  return out
}

function body(chunks: readonly Uint8Array[], reset: boolean): ReadableStream<Uint8Array> {
  let index = 0
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        const chunk = chunks[index++]
        if (chunk !== undefined) controller.enqueue(chunk)
        else if (reset) controller.error(Object.assign(new TypeError('terminated'), {}))
        else controller.close()
      },
    },
    { highWaterMark: 0 },
  )
}

const sse = { 'content-type': 'text/event-stream' }

interface Case {
  readonly deltas: readonly string[]
  /** Where the first answer is cut, as a fraction of the bytes after its first text (1: at its end). */
  readonly cutAt: number
  /** The first answer's text block closes before the cut (Anthropic's `content_block_stop`). */
  readonly closed: boolean
  /** A request without the prefill after the first (a restart) gets the whole answer, else the cut again. */
  readonly restartWhole: boolean
  readonly reset: boolean
  readonly firstChunks: readonly number[]
  readonly restDeltas: readonly number[]
  readonly restChunks: readonly number[]
}

const cases = fc.record({
  deltas,
  cutAt: fc.oneof(fc.constant(1), fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true })),
  closed: fc.boolean(),
  restartWhole: fc.boolean(),
  reset: fc.boolean(),
  firstChunks: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 6 }),
  restDeltas: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 4 }),
  restChunks: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 6 }),
})

/**
 * A scripted upstream: the first request is cut per the case, a continuation gets the rest; a
 * later request without the prefill is answered from the start, as a model does.
 */
function scripted(adapter: StreamAdapter, given: Case) {
  const answer = given.deltas.join('')
  const wire = wireFor(adapter)
  const head = [...wire.start(), ...wire.text(given.deltas[0] ?? '')].join('')
  const middle = given.deltas
    .slice(1)
    .flatMap((delta) => wire.text(delta))
    .join('')
  // Anthropic's block stop (the first of its closing frames) may come before the cut.
  const closing = given.closed && adapter === anthropicMessages ? wire.finish('stop')[0] : ''
  const first = encoder.encode(head + middle + closing)
  const from = encoder.encode(head).length
  const cut = from + Math.floor(given.cutAt * (first.length - from))
  let requests = 0
  const fetch = async (_input: string | URL | Request, init?: RequestInit) => {
    requests++
    const text = typeof init?.body === 'string' ? init.body : ''
    const prefill = prefillOf(adapter, text)
    if (prefill === undefined && requests > 1 && given.restartWhole) {
      const again = wireFor(adapter)
      const frames = [
        ...again.start(),
        ...given.deltas.flatMap((delta) => again.text(delta)),
        ...again.finish('stop'),
      ]
      return new Response(body(chunked(encoder.encode(frames.join('')), given.restChunks), false), {
        headers: sse,
      })
    }
    if (prefill === undefined) {
      const bytes = first.slice(0, cut)
      return new Response(body(chunked(bytes, given.firstChunks), given.reset), { headers: sse })
    }
    const rest = restAfter(prefill, [answer])
    if (rest === undefined) return new Response('{"error":"not a prefix"}', { status: 400 })
    const restWire = wireFor(adapter)
    const at = [...new Set(given.restDeltas.map((f) => Math.floor(f * rest.length)))].sort(
      (a, b) => a - b,
    )
    const parts: string[] = []
    let last = 0
    for (const i of [...at, rest.length]) {
      // Never inside a surrogate pair: a delta is a JSON string of whole characters.
      const safe = /[\uDC00-\uDFFF]/.test(rest[i] ?? '') ? i + 1 : i
      if (safe > last) parts.push(rest.slice(last, safe))
      last = Math.max(last, safe)
    }
    const frames = [
      ...restWire.start(),
      ...(parts.length === 0 ? restWire.text('') : parts.flatMap((part) => restWire.text(part))),
      ...restWire.finish('stop'),
    ].join('')
    return new Response(body(chunked(encoder.encode(frames), given.restChunks), false), {
      headers: sse,
    })
  }
  return { fetch, answer, requests: () => requests }
}

async function relayed(adapter: StreamAdapter, given: Case) {
  const upstream = scripted(adapter, given)
  const pool = createMemoryKeyPool([
    { id: 'a', secret: 'sk-prop-a-1234567890' },
    { id: 'b', secret: 'sk-prop-b-1234567890' },
  ])
  let outcome: RelayOutcome | undefined
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    pool,
    adapter,
    policy: { continueAfterCut: true, backoff: { baseMs: 1 } },
    onOutcome: (o) => {
      outcome = o
    },
  })
  return { upstream, pool, fetch, outcome: () => outcome }
}

async function until(done: () => boolean) {
  for (let i = 0; i < 100 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 2))
}

async function leasesSettle(pool: Parameters<typeof leaseTotals>[0]) {
  for (let i = 0; i < 50; i++) {
    const totals = await leaseTotals(pool)
    if (totals.inflight === 0 && totals.reported === totals.leased) return totals
    await new Promise((resolve) => setTimeout(resolve, 2))
  }
  return leaseTotals(pool)
}

/** What the gateway's attempt sends: its own request, the body read before `relay()`, or the ready attempt's. */
type Sends = 'context.request' | 'the original body' | 'the ready attempt'

/**
 * A gateway in process: each client request is relayed by `relay()` into a `webSink`. The
 * attempt sends the attempt's own request (`context.request`), or ignores it and sends the
 * body the gateway read (as a hand-written attempt that captured it does).
 */
function gateway(
  adapter: StreamAdapter,
  upstream: ReturnType<typeof scripted>,
  sends: Sends,
  continueAfterCut: boolean,
  onNextRoute = false,
) {
  const pool = createMemoryKeyPool([
    { id: 'a', secret: 'sk-prop-a-1234567890' },
    { id: 'b', secret: 'sk-prop-b-1234567890' },
  ])
  const outcomes: RelayOutcome[] = []
  const fetch = async (input: string | URL | Request, init?: RequestInit) => {
    const original = typeof init?.body === 'string' ? init.body : '{}'
    const { sink, response } = webSink()
    const attempt: AttemptFunction =
      sends === 'the ready attempt'
        ? fetchAttempt({ fetch: (url, init) => upstream.fetch(url, init) })
        : ({ signal, request }) =>
            upstream.fetch(String(input), {
              method: 'POST',
              body: sends === 'context.request' ? JSON.stringify(request?.body) : original,
              signal,
            })
    // With `onNextRoute` the cut's own adapter cannot continue: the next route (the same
    // protocol, the same upstream and pool) continues it.
    const { buildContinuation: _b, spliceContinuation: _s, ...cannotContinue } = adapter
    void relay({
      sink,
      pool,
      adapter: onNextRoute ? cannotContinue : adapter,
      request: { url: String(input), body: JSON.parse(original) },
      policy: {
        continueAfterCut: continueAfterCut && onNextRoute ? { nextRoute: true } : continueAfterCut,
        backoff: { baseMs: 1 },
        ...(onNextRoute ? { routes: [{ name: 'next', adapter, pool, attempt }] } : {}),
      },
      attempt,
    }).then((outcome) => outcomes.push(outcome))
    return response
  }
  return { fetch, pool, outcomes }
}

/** What a client's official SDK read: the text deltas, then how the stream ended. */
interface ClientView {
  readonly text: string
  readonly error: string | undefined
}

async function anthropicView(fetch: typeof globalThis.fetch): Promise<ClientView> {
  const client = new Anthropic({ apiKey: 'sk-x', baseURL: 'http://up.test', fetch, maxRetries: 0 })
  const stream = client.messages.stream({
    model: 'c',
    max_tokens: 64,
    messages: [{ role: 'user', content: 'hi' }],
  })
  let text = ''
  stream.on('text', (delta) => {
    text += delta
  })
  try {
    const message = await stream.finalMessage()
    expect(message.content.map((b) => (b.type === 'text' ? b.text : b.type)).join('')).toBe(text)
    return { text, error: undefined }
  } catch (error) {
    return { text, error: String(error) }
  }
}

async function chatView(fetch: typeof globalThis.fetch): Promise<ClientView> {
  const client = new OpenAI({ apiKey: 'sk-x', baseURL: 'http://up.test/v1', fetch, maxRetries: 0 })
  const stream = client.chat.completions.stream({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
  })
  let text = ''
  stream.on('content', (delta) => {
    text += delta
  })
  try {
    const completion = await stream.finalChatCompletion()
    expect(completion.choices[0]?.message.content ?? '').toBe(text)
    return { text, error: undefined }
  } catch (error) {
    return { text, error: String(error) }
  }
}

describe('invariant 20: a continuation whose answer restarts is never appended', () => {
  const adapters = fc.constantFrom<[string, StreamAdapter]>(
    ['anthropic', anthropicMessages],
    ['deepseek-prefix', openaiChatWith({ continuation: 'deepseek-prefix' })],
    ['mistral-prefix', openaiChatWith({ continuation: 'mistral-prefix' })],
    ['vllm-continue', openaiChatWith({ continuation: 'vllm-continue' })],
  )
  const sends = fc.constantFrom<Sends>('context.request', 'the original body', 'the ready attempt')
  it('a continuation whose answer restarts (it repeats what the client already has) is never appended, whatever the attempt function sent, on its own route or the next one (`nextRoute`): Anthropic and the three Chat dialects, read through the official SDK, get the whole answer or the received text and the honest error; every lease reported once', async () => {
    await fc.assert(
      fc.asyncProperty(
        cases,
        adapters,
        sends,
        fc.boolean(),
        async (given, [, adapter], sent, onNext) => {
          const view = adapter === anthropicMessages ? anthropicView : chatView
          // The same cut without continuation: the honest error a restart must end with.
          const told = await view(gateway(adapter, scripted(adapter, given), sent, false).fetch)
          const upstream = scripted(adapter, given)
          const { fetch, pool, outcomes } = gateway(adapter, upstream, sent, true, onNext)
          const got = await view(fetch)
          expect(upstream.answer.startsWith(got.text)).toBe(true)
          const own = sent !== 'the original body'
          if (own) {
            expect(got).toEqual({ text: upstream.answer, error: undefined })
          } else {
            expect(got).toEqual(told)
            expect(got.error).toBeDefined()
          }
          const totals = await leasesSettle(pool)
          expect(totals.inflight).toBe(0)
          expect(totals.reported).toBe(totals.leased)
          await until(() => outcomes.length > 0)
          expect(outcomes).toHaveLength(1)
          expect(outcomes[0]).toMatchObject({
            kind: 'committed',
            end: { kind: own ? 'completed' : 'error-written' },
            continuations: [
              {
                result: own ? 'spliced' : 'restarted',
                continuedOn: { route: onNext ? 'next' : 'primary' },
              },
            ],
          })
        },
      ),
      { numRuns: runs(40) },
    )
  })
})

describe('invariant 20', () => {
  it("a continuation's spliced answer, read through the official SDK, equals the upstream's answer exactly: Anthropic, cut anywhere after the first text (after its block closed, whitespace at the end), every lease reported once", async () => {
    await fc.assert(
      fc.asyncProperty(cases, async (given) => {
        const { upstream, pool, fetch, outcome } = await relayed(anthropicMessages, given)
        const client = new Anthropic({
          apiKey: 'sk-x',
          baseURL: 'http://up.test',
          fetch,
          maxRetries: 0,
        })
        const stream = client.messages.stream({
          model: 'c',
          max_tokens: 64,
          messages: [{ role: 'user', content: 'hi' }],
        })
        const message = await stream.finalMessage()
        expect(message.content.map((b) => (b.type === 'text' ? b.text : `<${b.type}>`))).toEqual([
          upstream.answer,
        ])
        expect(await stream.finalText()).toBe(upstream.answer)
        expect(message.stop_reason).toBe('end_turn')
        expect(upstream.requests()).toBe(2)
        const totals = await leasesSettle(pool)
        expect(totals).toEqual({ inflight: 0, leased: 2, reported: 2 })
        await until(() => outcome() !== undefined)
        expect(outcome()).toMatchObject({
          kind: 'committed',
          continuations: [{ result: 'spliced' }],
        })
      }),
      { numRuns: runs(40) },
    )
  })

  it("a continuation's spliced answer, read through the official SDK, equals the upstream's answer exactly: OpenAI Chat in each dialect (whitespace at the end), every lease reported once", async () => {
    const dialect = fc.constantFrom<OpenAIChatContinuation>(
      'deepseek-prefix',
      'mistral-prefix',
      'vllm-continue',
    )
    await fc.assert(
      fc.asyncProperty(cases, dialect, async (given, continuation) => {
        const adapter = openaiChatWith({ continuation })
        const { upstream, pool, fetch } = await relayed(adapter, given)
        const client = new OpenAI({
          apiKey: 'sk-x',
          baseURL: 'http://up.test/v1',
          fetch,
          maxRetries: 0,
        })
        const completion = await client.chat.completions
          .stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
          .finalChatCompletion()
        expect(completion.choices[0]?.message.content).toBe(upstream.answer)
        expect(completion.choices[0]?.finish_reason).toBe('stop')
        expect(upstream.requests()).toBe(2)
        expect(await leasesSettle(pool)).toEqual({ inflight: 0, leased: 2, reported: 2 })
      }),
      { numRuns: runs(40) },
    )
  })
})
