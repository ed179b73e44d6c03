import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type AttemptFunction,
  createMemoryKeyPool,
  type DownstreamSink,
  type KeyPool,
  openaiChat,
  openaiChatWith,
  type RelayOutcome,
  relay,
  type StreamAdapter,
  webSink,
} from '../../src/index.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { runs } from '../support/runs.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

/**
 * Invariant 18: user code cannot hang a client. Whatever the host's code does at any of its
 * call sites (throw, or return garbage), at any moment, the response settles, its body ends,
 * `relay()` resolves, `onOutcome` is called exactly once and every lease is reported.
 */

const complete = fixtureBytes('openai-chat/text.sse')
const role =
  'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
const text = (t: string) =>
  `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}}}]}\n\n`

const behaviours: Record<string, Behaviour> = {
  ok: { steps: [{ bytes: complete }] },
  empty: { steps: [{ bytes: role }] },
  partial: { steps: [{ bytes: role }, { bytes: text('Hel') }] },
  unavailable: {
    status: 503,
    headers: { 'content-type': 'application/json' },
    steps: [{ bytes: '{"error":{"type":"server_error","message":"busy"}}' }],
  },
  'error-frame': {
    steps: [{ bytes: 'data: {"error":{"type":"server_error","message":"later"}}\n\n' }],
  },
}

/** Every place the host's code runs. */
const sites = [
  'adapter.inspect',
  'adapter.renderError',
  'adapter.renderErrorBody',
  'adapter.renderStop',
  'adapter.buildContinuation',
  'adapter.spliceContinuation',
  'splice',
  'downstream.transform',
  'attempt',
  'hook.onAttempt',
  'hook.onCommit',
  'hook.onRetry',
  'hook.onGiveUp',
  'hook.onContinuation',
  'hook.onOutcome',
  'sink.sendHead',
  'sink.write',
  'sink.close',
  'pool.acquire',
] as const
type Site = (typeof sites)[number]

const failures = fc.record({
  site: fc.constantFrom(...sites),
  /** The call of that site that fails (1 = the first). */
  at: fc.integer({ min: 1, max: 4 }),
  how: fc.constantFrom('throw' as const, 'garbage' as const),
  script: fc.array(fc.constantFrom(...Object.keys(behaviours)), { minLength: 1, maxLength: 3 }),
  partialEof: fc.constantFrom('error' as const, 'synthesize-stop' as const),
  continueAfterCut: fc.boolean(),
})

/** A function that fails on its `at`-th call when `site` is the one chosen, else calls `real`. */
function hostile<A extends unknown[], R>(
  chosen: { site: Site; at: number; how: 'throw' | 'garbage' },
  site: Site,
  real: (...args: A) => R,
  garbage: unknown = null,
): (...args: A) => R {
  let calls = 0
  return (...args: A) => {
    calls++
    if (chosen.site === site && calls === chosen.at) {
      // A sink that does nothing looks like one that worked: for a sink, garbage is a throw.
      if (chosen.how === 'throw' || site.startsWith('sink.')) throw new Error(`${site} failed`)
      return garbage as R
    }
    return real(...args)
  }
}

/** Settles within `ms`, or fails the property naming what hung. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([promise, hung])
  } finally {
    clearTimeout(timer)
  }
}

describe('invariant 18: user code cannot hang a client', () => {
  it('a throw or a garbage return from any user-code call site, at any call: the response settles, relay() resolves, onOutcome once, every lease reported', async () => {
    await fc.assert(
      fc.asyncProperty(failures, async (chosen) => {
        const memory = createMemoryKeyPool([
          { id: 'a', secret: 'sk-a-0123456789' },
          { id: 'b', secret: 'sk-b-0123456789' },
        ])
        const pool: KeyPool = {
          ...memory,
          acquire: hostile(chosen, 'pool.acquire', (options) => memory.acquire(options)),
          enable: (id) => memory.enable(id),
          disable: (id) => memory.disable(id),
          stats: () => memory.stats(),
          toJSON: () => memory.toJSON(),
        }
        // With continuation on, a cut after output is continued (the script's next answer).
        const continuing = openaiChatWith({ continuation: 'vllm-continue' })
        const adapter: StreamAdapter = {
          ...openaiChat,
          name: 'hostile-chat',
          buildContinuation: hostile(
            chosen,
            'adapter.buildContinuation',
            (request, received) => continuing.buildContinuation?.(request, received) ?? null,
            { body: 'garbage' },
          ),
          spliceContinuation: hostile(
            chosen,
            'adapter.spliceContinuation',
            (received, client) => {
              const splice = continuing.spliceContinuation?.(received, client)
              return hostile(chosen, 'splice', (frame) => splice?.(frame) ?? [frame], 'garbage')
            },
            'garbage',
          ),
          inspect: hostile(chosen, 'adapter.inspect', openaiChat.inspect),
          renderError: hostile(chosen, 'adapter.renderError', openaiChat.renderError, 'text'),
          renderErrorBody: hostile(
            chosen,
            'adapter.renderErrorBody',
            (error) => openaiChat.renderErrorBody?.(error) ?? JSON.stringify({ error }),
            42,
          ),
          renderStop: hostile(chosen, 'adapter.renderStop', openaiChat.renderStop, undefined),
        }
        const upstream = scriptedUpstream(
          chosen.script.map((name) => behaviours[name] as Behaviour),
        )
        const attempt: AttemptFunction = hostile(chosen, 'attempt', upstream.attempt, {
          not: 'a response',
        })
        const { sink: web, response } = webSink()
        const sink: DownstreamSink = {
          get signal() {
            return web.signal
          },
          sendHead: hostile(chosen, 'sink.sendHead', (status, headers) =>
            web.sendHead(status, headers),
          ),
          write: hostile(chosen, 'sink.write', (chunk) => web.write(chunk)),
          close: hostile(chosen, 'sink.close', () => web.close()),
          abort: (reason) => web.abort(reason),
        }
        const outcomes: RelayOutcome[] = []
        const hook = (site: Site) => hostile(chosen, site, () => {})
        const relayed = relay({
          sink,
          request: {
            url: 'https://api.test/v1/chat/completions',
            body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
          },
          pool,
          adapter,
          attempt,
          policy: {
            maxAttempts: 2,
            backoff: { baseMs: 1, maxMs: 2 },
            onPartialEof: chosen.partialEof,
            continueAfterCut: chosen.continueAfterCut,
            downstream: {
              transform: hostile(chosen, 'downstream.transform', (frame) => frame.raw),
            },
          },
          hooks: {
            onAttempt: hook('hook.onAttempt'),
            onCommit: hook('hook.onCommit'),
            onRetry: hook('hook.onRetry'),
            onGiveUp: hook('hook.onGiveUp'),
            onContinuation: hook('hook.onContinuation'),
            onOutcome: (outcome) => {
              outcomes.push(outcome)
              hook('hook.onOutcome')()
            },
          },
        })
        const outcome = await within(relayed, 3_000, 'relay()')
        // The client's side ends: a response whose body can be read to its end (or fails).
        const settled = await within(
          response.then(
            (r) =>
              r.text().then(
                () => 'read',
                () => 'body failed',
              ),
            () => 'rejected',
          ),
          3_000,
          'the response',
        )
        expect(['read', 'body failed', 'rejected']).toContain(settled)
        expect(outcomes).toHaveLength(1)
        expect(outcomes[0]).toBe(outcome)
        const stats = await memory.stats()
        expect(stats.every((key) => key.inflight === 0)).toBe(true)
        for (const call of upstream.calls) expect(call.body?.released ?? true).toBe(true)
      }),
      { numRuns: runs(200) },
    )
  })
})
