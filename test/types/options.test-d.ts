import {
  type AttemptFunction,
  createFrameReader,
  createMemoryKeyPool,
  createResilientFetch,
  type FetchFunction,
  type FrameReader,
  type KeyPool,
  openaiChat,
  type PeekOutcome,
  peekFirstOutput,
  type RelayHooks,
  type RelayOutcome,
  relay,
  webSink,
} from 'stream-boundary'
import { describe, expectTypeOf, it } from 'vitest'

declare const body: ReadableStream<Uint8Array>
declare const reader: FrameReader
const keys = [{ id: 'a', secret: 'sk-a' }]

describe('options reject unknown keys', () => {
  it('createFrameReader', () => {
    expectTypeOf(createFrameReader(body, { maxFrameBytes: 1024 })).toEqualTypeOf<FrameReader>()
    // @ts-expect-error a misspelt option is a compile error, not a silent default
    createFrameReader(body, { maxFrameByte: 1024 })
  })

  it('peekFirstOutput', () => {
    expectTypeOf(
      peekFirstOutput(reader, openaiChat, { firstOutputTimeoutMs: 20_000 }),
    ).resolves.toEqualTypeOf<PeekOutcome>()
    // @ts-expect-error `firstOutputTimeout` is not an option (`firstOutputTimeoutMs` is)
    void peekFirstOutput(reader, openaiChat, { firstOutputTimeout: 20_000 })
    // @ts-expect-error commitOn is a closed set
    void peekFirstOutput(reader, openaiChat, { commitOn: 'first-byte' })
  })

  it('createMemoryKeyPool', () => {
    expectTypeOf(createMemoryKeyPool(keys, { defaultCooldownMs: 5_000 })).toExtend<KeyPool>()
    // @ts-expect-error `cooldownMs` is not an option (`defaultCooldownMs` is)
    createMemoryKeyPool(keys, { cooldownMs: 5_000 })
    // @ts-expect-error a key without its secret
    createMemoryKeyPool([{ id: 'a' }])
  })

  it('relay policy', () => {
    const { sink } = webSink()
    const attempt: AttemptFunction = async () => new Response('')
    const options = { sink, attempt, pool: createMemoryKeyPool(keys), adapter: openaiChat }
    expectTypeOf(
      relay({ ...options, policy: { maxAttempts: 2 } }),
    ).resolves.toEqualTypeOf<RelayOutcome>()
    // @ts-expect-error `retries` is not a policy option (`maxAttempts` is)
    void relay({ ...options, policy: { retries: 2 } })
  })

  it('createResilientFetch returns a fetch', () => {
    expectTypeOf(createResilientFetch()).toEqualTypeOf<FetchFunction>()
    expectTypeOf(createResilientFetch()).toExtend<
      (input: string | URL | Request, init?: RequestInit) => Promise<Response>
    >()
  })
})

type HookContext<Name extends keyof RelayHooks> = Parameters<NonNullable<RelayHooks[Name]>>[0]

describe('hooks and attempts receive readonly contexts', () => {
  it('every hook context is readonly through and through', () => {
    expectTypeOf<HookContext<'onAttempt'>>().toEqualTypeOf<Readonly<HookContext<'onAttempt'>>>()
    expectTypeOf<HookContext<'onRetry'>>().toEqualTypeOf<Readonly<HookContext<'onRetry'>>>()
    expectTypeOf<HookContext<'onCommit'>>().toEqualTypeOf<Readonly<HookContext<'onCommit'>>>()
    expectTypeOf<HookContext<'onGiveUp'>>().toEqualTypeOf<Readonly<HookContext<'onGiveUp'>>>()
    expectTypeOf<HookContext<'onContinuation'>>().toEqualTypeOf<
      Readonly<HookContext<'onContinuation'>>
    >()
    expectTypeOf<HookContext<'onOutcome'>>().toEqualTypeOf<RelayOutcome>()
  })

  it('assigning to a hook context is a compile error', () => {
    const hooks: RelayHooks = {
      onAttempt(context) {
        // @ts-expect-error readonly
        context.keyId = 'other'
      },
      onRetry(context) {
        // @ts-expect-error readonly
        context.delayMs = 0
      },
      onCommit(context) {
        // @ts-expect-error readonly
        context.timeToFirstOutputMs = 0
      },
      onContinuation(context) {
        // @ts-expect-error readonly
        context.result = 'spliced'
      },
      onGiveUp(context) {
        // @ts-expect-error readonly
        context.status = 200
        // @ts-expect-error a readonly array has no push
        context.attempts.push(context.attempts[0])
        // @ts-expect-error attempt records are readonly too
        if (context.attempts[0]) context.attempts[0].retryable = true
      },
      onOutcome(outcome) {
        // @ts-expect-error readonly
        outcome.kind = 'failed'
      },
    }
    expectTypeOf(hooks).toEqualTypeOf<RelayHooks>()
  })

  it('an attempt cannot rewrite its key', () => {
    const attempt: AttemptFunction = async ({ key, signal }) => {
      // @ts-expect-error readonly
      key.secret = 'sk-other'
      return fetch('http://upstream.test', { signal })
    }
    expectTypeOf(attempt).returns.resolves.toEqualTypeOf<Response>()
  })
})
