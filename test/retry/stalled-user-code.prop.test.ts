/**
 * Invariant 29, no unbounded wait on code the library does not own: an attempt function that
 * ignores its signal and never settles (or settles or throws late), a body that stalls before
 * or after output, a `ReadableStream` whose `cancel()` never settles, an `iterableResponse()`
 * over a generator stalled in an `await`, an iterator whose `return()` never settles: `relay()`
 * (and its twin `createResilientFetch`) settles and every lease returns within the request's
 * own bounds (its deadline, first-byte, first-output and idle bounds, the client leaving),
 * plus the short grace a release is given.
 */

import fc from 'fast-check'
import {
  createMemoryKeyPool,
  createResilientFetch,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
} from 'stream-boundary'
import { iterableResponse } from 'stream-boundary/node'
import { createRecordingSink } from 'stream-boundary/testing'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { leaseTotals } from '../support/leases.js'
import { runs } from '../support/runs.js'
import { useFakeClock } from '../support/timers.js'

afterEach(() => {
  vi.useRealTimers()
})

const encoder = new TextEncoder()
const roleOnly = encoder.encode(
  'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n',
)
const content = encoder.encode(
  'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n',
)
const never = () => new Promise<never>(() => {})
const sse = { 'content-type': 'text/event-stream' }

/** What one attempt does; `after` says whether it stalls after output (else before). */
interface Behaviour {
  readonly name: string
  readonly after: boolean
  answer(signal: AbortSignal, released: () => void): Promise<Response>
}

/** A stream that sends `first`, then never another byte, and whose `cancel()` never settles. */
function stalledStream(first: Uint8Array | undefined, released: () => void) {
  return new ReadableStream<Uint8Array>({
    start(controller) {
      if (first !== undefined) controller.enqueue(first)
    },
    pull: () => never(),
    cancel: () => {
      released()
      return never()
    },
  })
}

/** An async iterator that sends `first`, then stalls, and whose `return()` never settles. */
function stalledIterator(first: Uint8Array, released: () => void): AsyncIterable<Uint8Array> {
  let sent = false
  return {
    [Symbol.asyncIterator]: () => ({
      next: () => {
        if (sent) return never()
        sent = true
        return Promise.resolve({ done: false, value: first })
      },
      return: () => {
        released()
        return never()
      },
    }),
  }
}

const behaviours: readonly Behaviour[] = [
  { name: 'an attempt that never settles', after: false, answer: () => never() },
  {
    name: 'an attempt that answers after its bounds',
    after: false,
    answer: (_signal, released) =>
      new Promise((resolve) =>
        setTimeout(
          () => resolve(new Response(stalledStream(content, released), { headers: sse })),
          60_000,
        ),
      ),
  },
  {
    name: 'an attempt that throws after its bounds',
    after: false,
    answer: () =>
      new Promise((_resolve, reject) => setTimeout(() => reject(new Error('late')), 60_000)),
  },
  ...([false, true] as const).map(
    (after): Behaviour => ({
      name: `a ReadableStream that stalls ${after ? 'after' : 'before'} output; its cancel() never settles`,
      after,
      answer: async (_signal, released) =>
        new Response(stalledStream(after ? content : roleOnly, released), { headers: sse }),
    }),
  ),
  ...([false, true] as const).map(
    (after): Behaviour => ({
      name: `iterableResponse() over a generator stalled in an await ${after ? 'after' : 'before'} output`,
      after,
      answer: async () =>
        iterableResponse(
          (async function* () {
            yield after ? content : roleOnly
            await never()
          })(),
          { headers: sse },
        ),
    }),
  ),
  ...([false, true] as const).map(
    (after): Behaviour => ({
      name: `an iterable whose return() never settles, stalled ${after ? 'after' : 'before'} output`,
      after,
      answer: async (_signal, released) =>
        iterableResponse(stalledIterator(after ? content : roleOnly, released), { headers: sse }),
    }),
  ),
  {
    name: 'a 500 whose error body outgrows the bound, then stalls; its cancel() never settles',
    after: false,
    answer: async (_signal, released) =>
      new Response(stalledStream(new Uint8Array(70_000).fill(120), released), { status: 500 }),
  },
]

const grace = 100
const slack = 50

const cases = fc.record({
  behaviour: fc.constantFrom(...behaviours),
  twin: fc.constantFrom('relay', 'createResilientFetch'),
  stream: fc.boolean(),
  deadlineMs: fc.integer({ min: 200, max: 3000 }),
  firstByteTimeoutMs: fc.option(fc.integer({ min: 100, max: 3000 }), { nil: undefined }),
  firstOutputTimeoutMs: fc.option(fc.integer({ min: 100, max: 3000 }), { nil: undefined }),
  idleTimeoutMs: fc.integer({ min: 100, max: 3000 }),
  leavesAtMs: fc.option(fc.integer({ min: 50, max: 3000 }), { nil: undefined }),
  maxAttempts: fc.integer({ min: 1, max: 3 }),
})

type Case = typeof cases extends fc.Arbitrary<infer T> ? T : never

/** Runs one request under a fake clock; when it settled (ms), and what the pool and client saw. */
async function runCase(c: Case) {
  const pool = createMemoryKeyPool([
    { id: 'a', secret: 'sk-stall-a-0123456789' },
    { id: 'b', secret: 'sk-stall-b-0123456789' },
  ])
  const policy: RelayPolicy = {
    maxAttempts: c.maxAttempts,
    deadlineMs: c.deadlineMs,
    idleTimeoutMs: c.idleTimeoutMs,
    backoff: { baseMs: 1, maxMs: 2 },
    peek: {
      ...(c.firstByteTimeoutMs === undefined ? {} : { firstByteTimeoutMs: c.firstByteTimeoutMs }),
      ...(c.firstOutputTimeoutMs === undefined
        ? {}
        : { firstOutputTimeoutMs: c.firstOutputTimeoutMs }),
    },
  }
  const released: string[] = []
  const answer = (signal: AbortSignal) => c.behaviour.answer(signal, () => released.push('x'))
  const body = { model: 'm', stream: c.stream, messages: [{ role: 'user', content: 'hi' }] }
  let settledAt: number | undefined
  let outcome: RelayOutcome | undefined
  const settle = (o: RelayOutcome) => {
    settledAt ??= performance.now()
    outcome = o
  }
  const started = performance.now()
  let client = ''
  if (c.twin === 'relay') {
    const sink = createRecordingSink()
    if (c.leavesAtMs !== undefined) setTimeout(() => sink.disconnect(), c.leavesAtMs)
    void relay({
      sink,
      pool,
      adapter: openaiChat,
      request: { url: 'http://upstream.test/v1/chat/completions', body },
      attempt: ({ signal }) => answer(signal),
      policy,
    }).then(settle)
    await vi.advanceTimersByTimeAsync(10_000)
    client = `${sink.status} ${sink.text}`
  } else {
    const controller = new AbortController()
    if (c.leavesAtMs !== undefined) setTimeout(() => controller.abort(), c.leavesAtMs)
    const fetch = createResilientFetch({
      fetch: (_input, init) => answer(init?.signal as AbortSignal),
      pool,
      policy,
      onOutcome: settle,
    })
    const read = fetch('http://upstream.test/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: controller.signal,
    }).then(
      async (response) => `${response.status} ${await response.text().catch(() => 'cut')}`,
      () => 'rejected',
    )
    await vi.advanceTimersByTimeAsync(10_000)
    client = await Promise.race([read, Promise.resolve('pending')])
  }
  return {
    settledAfter: settledAt === undefined ? undefined : settledAt - started,
    outcome,
    client,
    totals: await leaseTotals(pool),
  }
}

describe('invariant 29: no unbounded wait on code the library does not own', () => {
  it('whatever the attempt function and its body do (never settle, stall, a cancel that never settles, throw late), relay() settles and every lease returns within the request’s bounds', async () => {
    await fc.assert(
      fc.asyncProperty(cases, async (c) => {
        useFakeClock()
        try {
          const { settledAfter, client, totals } = await runCase(c)
          // Before output the request's deadline ends it; after output its idle bound; the
          // client leaving ends either. Each release adds at most its grace.
          const committed = c.stream && c.behaviour.after
          const bound = Math.min(
            committed ? c.idleTimeoutMs : c.deadlineMs,
            c.leavesAtMs ?? Number.POSITIVE_INFINITY,
          )
          expect(settledAfter).toBeDefined()
          expect(settledAfter as number).toBeLessThanOrEqual(bound + 2 * grace + slack)
          expect(totals.inflight).toBe(0)
          expect(totals.reported).toBe(totals.leased)
          // The client got an end: an honest status before output, an end of the stream after.
          expect(client).not.toBe('pending')
          // No timer of the library's is left (the late attempts' own timers are theirs).
          if (!c.behaviour.name.includes('after its bounds')) expect(vi.getTimerCount()).toBe(0)
        } finally {
          vi.useRealTimers()
        }
      }),
      { numRuns: runs(60) },
    )
  })

  it.each(behaviours.map((b) => [b.name, b] as const))(
    '%s: relay() answers the client within the first-output bound and returns the lease',
    async (_name, behaviour) => {
      useFakeClock()
      const { settledAfter, totals, client } = await runCase({
        behaviour,
        twin: 'relay',
        stream: true,
        deadlineMs: 3000,
        firstByteTimeoutMs: undefined,
        firstOutputTimeoutMs: 1000,
        idleTimeoutMs: 1000,
        leavesAtMs: undefined,
        maxAttempts: 1,
      })
      expect(settledAfter).toBeDefined()
      expect(settledAfter as number).toBeLessThanOrEqual(1000 + 2 * grace + slack)
      expect(totals).toMatchObject({ inflight: 0 })
      expect(totals.reported).toBe(totals.leased)
      if (behaviour.after) expect(client).toMatch(/^200 .*Hi.*error/s)
      else expect(client).toMatch(/^50[24] /)
    },
  )
})
