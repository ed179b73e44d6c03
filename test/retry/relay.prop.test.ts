import fc from 'fast-check'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { createMemoryKeyPool, openaiChat, relay } from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import type { ScriptStep } from '../../src/testing/scripted-body.js'
import { runs } from '../support/runs.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

afterEach(() => {
  vi.useRealTimers()
})

const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
const text = (t: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}},"finish_reason":null}]}\n\n`
const stop = 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'

type Kind =
  | 'ok'
  | 'empty'
  | 'partial'
  | 'thinking'
  | 'error-frame'
  | 'fatal-frame'
  | 'status-429'
  | 'status-500'
  | 'status-401'
  | 'status-400'
  | 'status-529'
  | 'hang'
  | 'keepalives'
  | 'connection'
  | 'json-200'

const kinds: Kind[] = [
  'ok',
  'empty',
  'partial',
  'thinking',
  'error-frame',
  'fatal-frame',
  'status-429',
  'status-500',
  'status-401',
  'status-400',
  'status-529',
  'hang',
  'keepalives',
  'connection',
  'json-200',
]

/** Each attempt's output carries its own marker, so the client's bytes tell which attempts reached it. */
function behaviour(kind: Kind, marker: string): Behaviour {
  const steps = (...parts: (string | ScriptStep)[]): ScriptStep[] =>
    parts.map((p) => (typeof p === 'string' ? { bytes: p } : p))
  switch (kind) {
    case 'ok':
      return { steps: steps(role, text(`${marker} hello`), stop) }
    case 'empty':
      return { steps: steps(role) }
    case 'partial':
      return { steps: steps(role, text(`${marker} cut`)) }
    case 'thinking':
      return {
        steps: steps(
          `data: {"choices":[{"index":0,"delta":{"reasoning_content":"${marker}"}}]}\n\n`,
        ),
      }
    case 'error-frame':
      return { steps: steps(role, 'data: {"error":{"message":"busy","type":"server_error"}}\n\n') }
    case 'fatal-frame':
      return {
        steps: steps('data: {"error":{"message":"bad","type":"invalid_request_error"}}\n\n'),
      }
    case 'status-429':
      return {
        status: 429,
        headers: { 'retry-after': '1' },
        steps: steps('{"error":{"message":"slow down"}}'),
      }
    case 'status-500':
      return { status: 500, steps: steps('<html><title>500</title></html>') }
    case 'status-401':
      return { status: 401, steps: steps('{"error":{"message":"no"}}') }
    case 'status-400':
      return { status: 400, steps: steps('{"error":{"message":"bad request"}}') }
    case 'status-529':
      return {
        status: 529,
        steps: steps('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'),
      }
    case 'hang':
      return { steps: [{ hang: true }] }
    case 'keepalives':
      return { steps: Array.from({ length: 30 }, () => steps(': ping\n\n', { wait: 100 })).flat() }
    case 'connection':
      return {
        throws: Object.assign(new TypeError('fetch failed'), {
          cause: Object.assign(new Error('reset'), { code: 'ECONNRESET' }),
        }),
      }
    case 'json-200':
      return {
        headers: { 'content-type': 'application/json' },
        steps: steps('{"error":{"message":"oops","type":"server_error"}}'),
      }
  }
}

describe('relay properties', () => {
  it('for any sequence of upstream behaviours: at most one attempt reaches the client, none starts after commit, every body and timer is released, the pool counts every outcome once, and only upstream failures count against a key', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom(...kinds), { minLength: 1, maxLength: 6 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 4 }),
        fc.boolean(),
        fc.option(fc.integer({ min: 1, max: 3000 }), { nil: undefined }),
        async (script, keyCount, maxAttempts, earlyHeaders, disconnectAt) => {
          useFakeClock()
          const sink = createRecordingSink()
          const pool = createMemoryKeyPool(
            Array.from({ length: keyCount }, (_, i) => ({
              id: `k${i}`,
              secret: `sk-secret-${i}-abcdefghij`,
            })),
          )
          const upstream = scriptedUpstream((call) =>
            behaviour(script[Math.min(call, script.length - 1)] as Kind, `[attempt-${call + 1}]`),
          )
          const pending = relay({
            sink,
            pool,
            adapter: openaiChat,
            attempt: upstream.attempt,
            policy: {
              maxAttempts,
              earlyHeaders,
              keepAliveIntervalMs: Number.POSITIVE_INFINITY,
              backoff: { baseMs: 100, maxMs: 400 },
              peek: { firstByteTimeoutMs: 1000, firstOutputTimeoutMs: 1500 },
              idleTimeoutMs: 2000,
            },
          })
          if (disconnectAt !== undefined) {
            await vi.advanceTimersByTimeAsync(disconnectAt)
            sink.disconnect()
          }
          await vi.advanceTimersByTimeAsync(60_000)
          const outcome = await pending

          // (a) the client saw output from at most one attempt.
          const markers = new Set(sink.text.match(/\[attempt-\d+\]/g) ?? [])
          expect(markers.size).toBeLessThanOrEqual(1)
          // (b) no attempt started after the one that committed.
          if (outcome.kind === 'committed') {
            const committed = outcome.attempts.findIndex((a) => a.result === 'committed')
            expect(committed).toBe(outcome.attempts.length - 1)
            expect(upstream.calls).toHaveLength(outcome.attempts.length)
            if (markers.size === 1)
              expect([...markers][0]).toBe(`[attempt-${upstream.calls.length}]`)
          } else {
            expect(outcome.attempts.some((a) => a.result === 'committed')).toBe(false)
          }
          // A 429 on a key not tried before uses no attempt (issue 46): at most one such free
          // attempt per key of the pool on top of `maxAttempts`.
          const limited = outcome.attempts.filter((a) => a.result === 'status-429').length
          expect(upstream.calls.length).toBeLessThanOrEqual(
            maxAttempts + Math.min(limited, keyCount),
          )
          const counted = outcome.attempts.filter(
            (a, i) =>
              i === 0 ||
              outcome.attempts[i - 1]?.result !== 'status-429' ||
              outcome.attempts.slice(0, i).some((before) => before.keyId === a.keyId),
          )
          expect(counted.length).toBeLessThanOrEqual(maxAttempts)
          // (c) every upstream body was released.
          expect(upstream.calls.every((c) => c.body === undefined || c.body.released)).toBe(true)
          // (d) no timer is left.
          expect(vi.getTimerCount()).toBe(0)
          // (e) every lease was reported exactly once, and the counters match what happened.
          const stats = await pool.stats()
          const sum = (f: (s: (typeof stats)[number]) => number) =>
            stats.reduce((n, s) => n + f(s), 0)
          expect(sum((s) => s.inflight)).toBe(0)
          // A lease may end unused when the client leaves during a backoff (reported as client-gone).
          const leases = sum((s) => s.leases)
          expect(leases - upstream.calls.length).toBeGreaterThanOrEqual(0)
          expect(leases - upstream.calls.length).toBeLessThanOrEqual(1)
          expect(sum((s) => Object.values(s.outcomes).reduce((a, b) => a + b, 0))).toBe(leases)
          const attemptsWith = (result: string) =>
            outcome.attempts.filter((a) => a.result === result).length
          expect(sum((s) => s.outcomes['rate-limited'])).toBe(attemptsWith('status-429'))
          expect(sum((s) => s.outcomes['auth-failed'])).toBe(attemptsWith('status-401'))
          // Invariants 6 and 7: only upstream failures count against a key. A client that went
          // away or a failed write is never a server error, and a protocol fault (empty stream,
          // timeout, non-SSE body) never cools a key down or opens its circuit.
          const serverErrors = outcome.attempts.filter((a) =>
            // (529 is overload; a 2xx that is not an event stream, such as json-200, is a
            // protocol fault even when its body states a server_error.)
            /^status-5(?!29)|^connection-|^error-frame:server_error/.test(a.result),
          ).length
          expect(sum((s) => s.outcomes['server-error'])).toBe(serverErrors)
          const faultOnly = stats.filter(
            (s) =>
              s.outcomes['protocol-fault'] > 0 &&
              s.outcomes['rate-limited'] === 0 &&
              s.outcomes['server-error'] === 0 &&
              s.outcomes['auth-failed'] === 0,
          )
          for (const key of faultOnly) {
            expect(pool.toJSON().keys.find((k) => k.id === key.id)).toMatchObject({
              cooldownUntil: 0,
              circuit: 'closed',
              disabled: false,
            })
          }
          // Nothing secret in what the host is told.
          expect(JSON.stringify(outcome)).not.toContain('sk-secret')
          vi.useRealTimers()
        },
      ),
      { numRuns: runs(200) },
    )
  })
})
