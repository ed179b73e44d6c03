import { describe, expect, it } from 'vitest'
import {
  createCommitGate,
  createFrameReader,
  createHedging,
  createMemoryKeyPool,
  createResilientFetch,
  deliver,
  openaiChat,
  openaiChatWith,
  peekFirstOutput,
  relay,
  webSink,
} from '../../src/index.js'
import { createRedisKeyPool } from '../../src/redis.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'

/**
 * Strict options: everywhere a user passes an options object, a key the library does not
 * know (a typo, a wrong case) is a `TypeError` naming it and the nearest valid name, instead
 * of an option silently ignored.
 */

const body = () => new Response('data: {}\n\n').body as ReadableStream<Uint8Array>
const keys = [{ id: 'a', secret: 'sk-a-0123456789' }]
const attempt = async () => new Response('')

const rows: readonly [string, () => unknown, string][] = [
  [
    'relay: a top-level typo',
    () => relay({ sink: createRecordingSink(), adapter: openaiChat, attempt, polcy: {} } as never),
    'relay: unknown option "polcy"; did you mean "policy"?',
  ],
  [
    'relay: policy.maxAtempts',
    () =>
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt,
        policy: { maxAtempts: 2 } as never,
      }),
    'policy: unknown option "maxAtempts"; did you mean "maxAttempts"?',
  ],
  [
    'relay: policy.peek.firstOutputTimeoutMS (wrong case)',
    () =>
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt,
        policy: { peek: { firstOutputTimeoutMS: 2000 } as never },
      }),
    'policy.peek: unknown option "firstOutputTimeoutMS"; did you mean "firstOutputTimeoutMs"?',
  ],
  [
    'relay: policy.backoff',
    () =>
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt,
        policy: { backoff: { delay: 5 } as never },
      }),
    'policy.backoff: unknown option "delay"',
  ],
  [
    'relay: policy.downstream',
    () =>
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt,
        policy: { downstream: { keepalive: false } as never },
      }),
    'policy.downstream: unknown option "keepalive"; did you mean "keepAlive"?',
  ],
  [
    'relay: hooks',
    () =>
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt,
        hooks: { onComit: () => {} } as never,
      }),
    'relay: hooks: unknown option "onComit"; did you mean "onCommit"?',
  ],
  [
    'relay: policy.fitContextWindow',
    () =>
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt,
        policy: { fitContextWindow: { marginToken: 5 } as never },
      }),
    'fitContextWindow: unknown option "marginToken"; did you mean "marginTokens"?',
  ],
  [
    'relay: policy.continueAfterCut',
    () =>
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt,
        policy: { continueAfterCut: { maxContinuation: 2 } as never },
      }),
    'policy.continueAfterCut: unknown option "maxContinuation"; did you mean "maxContinuations"?',
  ],
  [
    'openaiChatWith',
    () => openaiChatWith({ continuations: 'vllm-continue' } as never),
    'openaiChatWith: unknown option "continuations"; did you mean "continuation"?',
  ],
  [
    'createResilientFetch',
    () => createResilientFetch({ maxRequestBodyByte: 5 } as never),
    'createResilientFetch: unknown option "maxRequestBodyByte"; did you mean "maxRequestBodyBytes"?',
  ],
  [
    'createHedging',
    () => createHedging({ afterMS: 5 } as never),
    'createHedging: unknown option "afterMS"; did you mean "afterMs"?',
  ],
  [
    'createHedging: adaptive',
    () => createHedging({ adaptive: { warmup: 5 } } as never),
    'createHedging: adaptive: unknown option "warmup"; did you mean "warmUp"?',
  ],
  [
    'createMemoryKeyPool',
    () => createMemoryKeyPool(keys, { maxInFlight: 2 } as never),
    'createMemoryKeyPool: unknown option "maxInFlight"; did you mean "maxInflight"?',
  ],
  [
    'createRedisKeyPool',
    () => createRedisKeyPool(keys, { prefix: 'p', redis: {}, leaseTTLMs: 5 } as never),
    'createRedisKeyPool: unknown option "leaseTTLMs"; did you mean "leaseTtlMs"?',
  ],
  [
    'deliver',
    () =>
      deliver({
        gate: createCommitGate(createRecordingSink()),
        body: body(),
        adapter: openaiChat,
        idleTimeout: 5,
      } as never),
    'deliver: unknown option "idleTimeout"; did you mean "idleTimeoutMs"?',
  ],
  [
    'createCommitGate',
    () => createCommitGate(createRecordingSink(), { earlyHeader: true } as never),
    'createCommitGate: unknown option "earlyHeader"; did you mean "earlyHeaders"?',
  ],
  [
    'webSink',
    () => webSink({ highWatermark: 5 } as never),
    'webSink: unknown option "highWatermark"; did you mean "highWaterMark"?',
  ],
  [
    'createFrameReader',
    () => createFrameReader(body(), { maxFrameByte: 5 } as never),
    'createFrameReader: unknown option "maxFrameByte"; did you mean "maxFrameBytes"?',
  ],
  [
    'peekFirstOutput',
    () => peekFirstOutput(createFrameReader(body()), openaiChat, { commiton: 'visible' } as never),
    'peek: unknown option "commiton"; did you mean "commitOn"?',
  ],
  [
    'createFaultyUpstream',
    () => createFaultyUpstream({ scenario: {} } as never),
    'createFaultyUpstream: unknown option "scenario"; did you mean "scenarios"?',
  ],
]

describe('an unknown option is a TypeError naming it and the nearest valid name', () => {
  it.each(rows)('%s', async (_, call, message) => {
    let caught: unknown
    try {
      await call()
    } catch (error) {
      caught = error
    }
    expect(caught).toBeInstanceOf(TypeError)
    expect((caught as Error).message).toBe(message)
  })
})
