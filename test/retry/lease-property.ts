import fc from 'fast-check'
import { expect, vi } from 'vitest'
import {
  type AttemptFunction,
  createHedging,
  type DownstreamSink,
  type KeyPool,
  openaiChat,
  type PoolKey,
  type RelayHooks,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import type { ScriptStep } from '../../src/testing/scripted-body.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { leaseTotals, withLatency } from '../support/leases.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

/**
 * The lease property (invariant 11), shared by the memory and the Redis pool: a throw or an
 * abort at any await point of an attempt leaves every in-flight count at 0 and the outcome
 * counts equal to the leases.
 */

const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
const ok: Behaviour = { steps: [{ bytes: fixtureBytes('openai-chat/text.sse') }] }
const emptyEof: Behaviour = { steps: [{ bytes: role }] }

type SinkFault = 'none' | 'sendHead' | 'write' | 'flush' | 'close' | 'disconnect'
type HookFault = 'none' | keyof RelayHooks
type UpstreamKind =
  | 'ok'
  | 'empty'
  | 'status-500'
  | 'status-429'
  | 'throws'
  | 'not-response'
  | 'read-error'
  | 'hang'
  | 'partial'

function upstreamBehaviour(kind: UpstreamKind): Behaviour | 'not-response' {
  const steps = (...parts: (string | ScriptStep)[]): ScriptStep[] =>
    parts.map((p) => (typeof p === 'string' ? { bytes: p } : p))
  switch (kind) {
    case 'ok':
      return ok
    case 'empty':
      return emptyEof
    case 'status-500':
      return { status: 500, steps: steps('{"error":{"message":"boom"}}') }
    case 'status-429':
      return {
        status: 429,
        headers: { 'retry-after': '1' },
        steps: steps('{"error":{"message":"slow"}}'),
      }
    case 'throws':
      return { throws: new TypeError('fetch failed') }
    case 'not-response':
      return 'not-response'
    case 'read-error':
      return { steps: steps(role, { error: new Error('socket reset') }) }
    case 'partial':
      return {
        steps: steps(
          role,
          'data: {"choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}\n\n',
          { error: new Error('cut') },
        ),
      }
    case 'hang':
      return { steps: [{ hang: true }] }
  }
}

function faultySink(fault: SinkFault, after: number) {
  const recording = createRecordingSink()
  let calls = 0
  const maybeThrow = (method: SinkFault) => {
    if (fault === method && calls++ >= after) throw new Error(`${method} failed`)
  }
  const sink: DownstreamSink = {
    signal: recording.signal,
    sendHead(status, headers) {
      maybeThrow('sendHead')
      return recording.sendHead(status, headers)
    },
    write(chunk) {
      maybeThrow('write')
      return recording.write(chunk)
    },
    flush() {
      maybeThrow('flush')
    },
    close() {
      maybeThrow('close')
      return recording.close()
    },
    abort(reason) {
      recording.abort(reason)
    },
  }
  return { sink, recording }
}

/** Makes the pool under test (fresh per run). */
export type LeasePoolFactory = (
  keys: readonly PoolKey[],
  options: { maxInflight: number },
) => Promise<KeyPool>

/**
 * Runs the lease property. With fake timers (the memory pool) the policy's clocks are
 * seconds long and time is advanced; with real timers (a Redis pool, whose round trips are
 * real I/O) they are tens of milliseconds.
 */
export async function checkLeaseProperty(
  makePool: LeasePoolFactory,
  options: { numRuns: number; realTimers?: boolean },
): Promise<void> {
  const scale = options.realTimers ? 0.05 : 1
  await fc.assert(
    fc.asyncProperty(
      fc.array(
        fc.constantFrom<UpstreamKind>(
          'ok',
          'empty',
          'status-500',
          'status-429',
          'throws',
          'not-response',
          'read-error',
          'hang',
          'partial',
        ),
        { minLength: 1, maxLength: 5 },
      ),
      fc.constantFrom<SinkFault>('none', 'sendHead', 'write', 'flush', 'close', 'disconnect'),
      fc.integer({ min: 0, max: 2 }),
      fc.constantFrom<HookFault>(
        'none',
        'onAttempt',
        'onHedge',
        'onRetry',
        'onCommit',
        'onGiveUp',
        'onOutcome',
      ),
      fc.record({
        keyCount: fc.integer({ min: 1, max: 3 }),
        maxInflight: fc.constantFrom(1, 2, Number.POSITIVE_INFINITY),
        maxAttempts: fc.integer({ min: 1, max: 4 }),
        earlyHeaders: fc.boolean(),
        deadlineMs: fc.option(fc.integer({ min: 500, max: 6_000 }), { nil: undefined }),
        disconnectAt: fc.integer({ min: 0, max: 4_000 }),
        // Hedged races too: a throw or abort while several attempts run leaks nothing either.
        hedge: fc.boolean(),
        // A store that answers in its own time (on top of Redis's real round trips):
        // attempts settle while the relay awaits acquire or report.
        poolLatencyMs: fc.constantFrom(0, 0, 100, 300),
      }),
      async (script, sinkFault, after, hookFault, setup) => {
        if (!options.realTimers) useFakeClock()
        const ms = (value: number) => Math.max(1, Math.round(value * scale))
        const pool = await makePool(
          Array.from({ length: setup.keyCount }, (_, i) => ({
            id: `k${i}`,
            secret: `sk-secret-${i}-abcdefgh`,
          })),
          { maxInflight: setup.maxInflight },
        )
        const slowPool = withLatency(pool, setup.poolLatencyMs === 0 ? 0 : ms(setup.poolLatencyMs))
        const { sink, recording } = faultySink(sinkFault, after)
        const upstream = scriptedUpstream((call) => {
          const behaviour = upstreamBehaviour(
            script[Math.min(call, script.length - 1)] as UpstreamKind,
          )
          return behaviour === 'not-response' ? { status: 200 } : behaviour
        })
        let call = 0
        const attempt: AttemptFunction = async (context) => {
          const kind = script[Math.min(call++, script.length - 1)]
          if (kind === 'not-response') return 'nope' as unknown as Response
          return upstream.attempt(context)
        }
        const hooks: RelayHooks =
          hookFault === 'none'
            ? {}
            : {
                [hookFault]: () => {
                  throw new Error('hook failed')
                },
              }
        const pending = relay({
          sink,
          pool: slowPool,
          adapter: openaiChat,
          attempt,
          hooks,
          policy: {
            maxAttempts: setup.maxAttempts,
            earlyHeaders: setup.earlyHeaders,
            deadlineMs: setup.deadlineMs === undefined ? undefined : ms(setup.deadlineMs),
            keepAliveIntervalMs: Number.POSITIVE_INFINITY,
            backoff: { baseMs: ms(100), maxMs: ms(400) },
            peek: { firstByteTimeoutMs: ms(1_000), firstOutputTimeoutMs: ms(1_500) },
            idleTimeoutMs: ms(2_000),
            hedge: setup.hedge ? createHedging({ afterMs: ms(300), budget: 1 }) : undefined,
          },
        })
        if (options.realTimers) {
          if (sinkFault === 'disconnect') {
            await new Promise((resolve) => setTimeout(resolve, ms(setup.disconnectAt)))
            recording.disconnect()
          }
        } else {
          if (sinkFault === 'disconnect') {
            await vi.advanceTimersByTimeAsync(setup.disconnectAt)
            recording.disconnect()
          }
          await vi.advanceTimersByTimeAsync(60_000)
        }
        const outcome = await pending
        expect(['committed', 'failed', 'client-gone']).toContain(outcome.kind)
        // Every attempt's record is final once the request is over, hedged ones included.
        expect(outcome.attempts.filter((a) => a.result === 'running')).toEqual([])
        expect(outcome.attempts.map((a) => a.attemptNumber)).toEqual(
          outcome.attempts.map((_, i) => i + 1),
        )
        const { inflight, leased, reported } = await leaseTotals(pool)
        expect(inflight).toBe(0)
        expect(reported).toBe(leased)
        expect(leased).toBeGreaterThanOrEqual(outcome.attempts.length)
        expect(upstream.calls.every((c) => c.body === undefined || c.body.released)).toBe(true)
        if (!options.realTimers) {
          expect(vi.getTimerCount()).toBe(0)
          vi.useRealTimers()
        }
      },
    ),
    { numRuns: options.numRuns },
  )
}
