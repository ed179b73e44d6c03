/**
 * Guarantee 30, "checked once": a relay built once per endpoint (`createRelay`, and its twin
 * `createResilientFetch`) checks, defaults and freezes its options when it is built; nothing
 * on the per-request or per-attempt path normalises an option again. Every options
 * normaliser of src/ counts itself in `normalizations` (src/options.ts): these tests read the
 * counts around requests, streaming and not, retried across keys, on a fallback route,
 * hedged, continued after a cut, falling back to a non-streaming request and fitted to the
 * context window.
 */

import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createHedging,
  createMemoryKeyPool,
  createRelay,
  createResilientFetch,
  fetchAttempt,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { normalizations } from '../../src/options.js'
import { chaosMarker } from '../../src/testing/chaos-marker.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { createRecordingSink } from '../../src/testing/index.js'

/** The normalisers that ran during `run`, by name, with how often. */
async function countedDuring(run: () => Promise<unknown>): Promise<Record<string, number>> {
  const before = { ...normalizations }
  await run()
  const ran: Record<string, number> = {}
  for (const [name, count] of Object.entries(normalizations)) {
    const more = count - (before[name] ?? 0)
    if (more > 0) ran[name] = more
  }
  return ran
}

const scenarios = {
  ok: ['ok'],
  'retry-next-key': ['rate-limited', 'ok'],
  'fallback-route': ['html-500', 'html-500', 'html-500', 'html-500', 'ok'],
  hedged: ['headers-then-hang', 'ok'],
  cut: ['partial-then-cut', 'ok'],
  'non-streaming-fallback': ['streaming-unsupported', 'ok'],
  'context-overflow': ['context-overflow', 'ok'],
} satisfies Record<string, Scenario>
type Name = keyof typeof scenarios

const chatUrl = 'http://upstream.test/v1/chat/completions'
const messagesUrl = 'http://upstream.test/v1/messages'
let ids = 0

/** A request body that plays `scenario` from its first attempt (its own counter upstream). */
function bodyFor(scenario: Name, stream: boolean, adapter: StreamAdapter) {
  const content = chaosMarker({ scenario, requestId: `r${++ids}` })
  return adapter === anthropicMessages
    ? { model: 'claude-test', max_tokens: 64, stream, messages: [{ role: 'user', content }] }
    : { model: 'm', max_tokens: 30_000, stream, messages: [{ role: 'user', content }] }
}

const keys = () =>
  createMemoryKeyPool([
    { id: 'a', secret: 'sk-checked-once-a-123456' },
    { id: 'b', secret: 'sk-checked-once-b-123456' },
    { id: 'c', secret: 'sk-checked-once-c-123456' },
  ])

/** Every bound and feature a policy can turn on, with hedging and a fallback route. */
function largePolicy(pool: ReturnType<typeof keys>, fetch: typeof globalThis.fetch): RelayPolicy {
  return {
    maxAttempts: 2,
    deadlineMs: 20_000,
    maxWaitMs: 5_000,
    backoff: { baseMs: 1, maxMs: 5 },
    peek: { firstByteTimeoutMs: 5_000, firstOutputTimeoutMs: 5_000, maxPeekFrames: 64 },
    nonStreamingFallback: { timeoutMs: 5_000 },
    fitContextWindow: { floorTokens: 1_000 },
    continueAfterCut: { maxContinuations: 2 },
    hedge: createHedging({ afterMs: 40, budget: 1, minHedgesPerWindow: 100, overloadPauseMs: 0 }),
    idleTimeoutMs: 10_000,
    writeStallTimeoutMs: 10_000,
    keepAliveIntervalMs: 5_000,
    maxFrameBytes: 65_536,
    maxErrorBodyBytes: 4_096,
    routes: [{ name: 'backup', adapter: openaiChat, pool, attempt: fetchAttempt({ fetch }) }],
  }
}

/** What the outcome must show, so that each case really took the path it names. */
type Shown = Partial<Record<'route' | 'mode' | 'attempts' | 'hedges', unknown>>
const cases: readonly { name: Name; stream: boolean; shows: Shown }[] = [
  { name: 'ok', stream: true, shows: { mode: 'stream', attempts: 1 } },
  { name: 'ok', stream: false, shows: { mode: 'non-streaming', attempts: 1 } },
  { name: 'retry-next-key', stream: true, shows: { attempts: 2 } },
  { name: 'retry-next-key', stream: false, shows: { attempts: 2 } },
  { name: 'fallback-route', stream: true, shows: { route: 'backup' } },
  { name: 'hedged', stream: true, shows: { hedges: 1 } },
  { name: 'non-streaming-fallback', stream: true, shows: { mode: 'non-streaming', attempts: 2 } },
  { name: 'context-overflow', stream: true, shows: { attempts: 2 } },
]

function shown(outcome: RelayOutcome | undefined, shows: Shown): Shown & { result: unknown } {
  const committed = outcome?.kind === 'committed' ? outcome : undefined
  const all: Shown = {
    route: committed?.route,
    mode: committed?.mode,
    attempts: outcome?.attempts.length,
    hedges: committed?.hedges?.started,
  }
  return {
    result: outcome?.result,
    ...Object.fromEntries(Object.keys(shows).map((key) => [key, all[key as keyof Shown]])),
  }
}

describe('checked once: a relay built once normalises no option per request or per attempt', () => {
  it('createRelay: streaming and not, retried across keys, on a fallback route, hedged, falling back to non-streaming, fitted: 0 normalisations per request', async () => {
    const upstream = createFaultyUpstream({ scenarios })
    const pool = keys()
    const chat = createRelay({
      pool,
      adapter: openaiChat,
      attempt: fetchAttempt({ fetch: upstream.fetch }),
      policy: largePolicy(pool, upstream.fetch),
      hooks: { onOutcome: () => {} },
    })
    for (const { name, stream, shows } of cases) {
      const sink = createRecordingSink()
      const request = { url: chatUrl, body: bodyFor(name, stream, openaiChat) }
      let outcome: RelayOutcome | undefined
      const ran = await countedDuring(async () => {
        outcome = await chat({ sink, request })
      })
      expect({ name, stream, ran }).toEqual({ name, stream, ran: {} })
      expect({ name, stream, ...shown(outcome, shows) }).toEqual({
        name,
        stream,
        result: 'completed',
        ...shows,
      })
    }
    // The scenarios really took the paths they name.
    const faults = upstream.requests.map((each) => each.fault)
    expect(faults).toEqual(
      expect.arrayContaining([
        'rate-limited',
        'html-500',
        'headers-then-hang',
        'streaming-unsupported',
      ]),
    )
    expect(faults).toContain('context-overflow')
  })

  it('createRelay with the attempt function and hooks given per request, and continueAfterCut: 0 normalisations per request', async () => {
    const upstream = createFaultyUpstream({ scenarios })
    const messages = createRelay({
      pool: keys(),
      adapter: anthropicMessages,
      policy: { continueAfterCut: true, backoff: { baseMs: 1 } },
    })
    const attempt = fetchAttempt({ fetch: upstream.fetch })
    const committed: number[] = []
    for (const name of ['ok', 'cut', 'retry-next-key'] as const) {
      const sink = createRecordingSink()
      let outcome: RelayOutcome | undefined
      const ran = await countedDuring(async () => {
        outcome = await messages({
          sink,
          request: { url: messagesUrl, body: bodyFor(name, true, anthropicMessages) },
          attempt,
          hooks: { onCommit: ({ attemptNumber }) => committed.push(attemptNumber) },
        })
      })
      expect({ name, ran }).toEqual({ name, ran: {} })
      expect(outcome?.result).toBe('completed')
      if (name === 'cut' && outcome?.kind === 'committed')
        expect(outcome.continuations?.map((each) => each.result)).toEqual(['spliced'])
    }
    expect(committed).toHaveLength(3)
    expect(upstream.requests.map((each) => each.fault)).toContain('partial-then-cut')
  })

  it('createResilientFetch: streaming and not, retried, continued, and with the adapter picked by URL: 0 normalisations per request', async () => {
    const upstream = createFaultyUpstream({ scenarios })
    const outcomes: RelayOutcome[] = []
    const given = createResilientFetch({
      fetch: upstream.fetch,
      pool: keys(),
      adapter: anthropicMessages,
      policy: { continueAfterCut: true, backoff: { baseMs: 1 }, nonStreamingFallback: true },
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    const byUrl = createResilientFetch({
      fetch: upstream.fetch,
      pool: keys(),
      policy: { backoff: { baseMs: 1 } },
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    const post = async (fetch: typeof given, url: string, body: unknown) => {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
      await response.text()
      // The outcome is reported once the relay settled.
      while (outcomes.length < seen + 1) await new Promise((resolve) => setTimeout(resolve, 1))
      seen++
    }
    let seen = 0
    // The adapter picked by URL is built on its protocol's first request, once.
    await post(byUrl, chatUrl, bodyFor('ok', true, openaiChat))
    const runs: [typeof given, string, Name, boolean, StreamAdapter][] = [
      [given, messagesUrl, 'ok', true, anthropicMessages],
      [given, messagesUrl, 'ok', false, anthropicMessages],
      [given, messagesUrl, 'retry-next-key', true, anthropicMessages],
      [given, messagesUrl, 'retry-next-key', false, anthropicMessages],
      [given, messagesUrl, 'cut', true, anthropicMessages],
      [byUrl, chatUrl, 'ok', true, openaiChat],
      [byUrl, chatUrl, 'retry-next-key', false, openaiChat],
    ]
    for (const [fetch, url, name, stream, adapter] of runs) {
      const ran = await countedDuring(() => post(fetch, url, bodyFor(name, stream, adapter)))
      expect({ name, stream, ran }).toEqual({ name, stream, ran: {} })
      expect(outcomes.at(-1)?.result).toBe('completed')
    }
    expect(upstream.requests.map((each) => each.fault)).toContain('partial-then-cut')
    const continued = outcomes.find((each) => each.kind === 'committed' && each.continuations)
    expect(continued?.kind === 'committed' && continued.continuations?.[0]?.result).toBe('spliced')
  })

  it('the count is real: relay() checks its options on every call, and a normaliser counts itself', async () => {
    const upstream = createFaultyUpstream({ scenarios })
    const ran = await countedDuring(() =>
      relay({
        sink: createRecordingSink(),
        pool: keys(),
        adapter: openaiChat,
        request: { url: chatUrl, body: bodyFor('ok', true, openaiChat) },
        attempt: fetchAttempt({ fetch: upstream.fetch }),
      }),
    )
    expect(ran).toMatchObject({ policy: 1, peek: 1, pump: 1, createCommitGate: 1 })
  })
})
