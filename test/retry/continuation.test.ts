import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { continueAfterCutDefaults } from '../../src/advanced.js'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  openaiChatWith,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { createRecordingSink } from '../../src/testing/index.js'

const answer = 'The quick brown fox jumps over the lazy dog.'

function setup(scenario: Scenario, policy: RelayPolicy = {}, adapter?: StreamAdapter) {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const outcomes: RelayOutcome[] = []
  const reports: string[] = []
  const pool = createMemoryKeyPool([
    { id: 'a', secret: 'sk-continue-a-1234567890' },
    { id: 'b', secret: 'sk-continue-b-1234567890' },
  ])
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    pool,
    ...(adapter === undefined ? {} : { adapter }),
    policy: { backoff: { baseMs: 1 }, continueAfterCut: true, ...policy },
    onOutcome: (o) => outcomes.push(o),
  })
  const headers = { 'x-fault-scenario': 's' }
  return {
    upstream,
    outcomes,
    reports,
    pool,
    openai: new OpenAI({
      apiKey: 'sk-x',
      baseURL: 'http://upstream.test/v1',
      fetch,
      maxRetries: 0,
      defaultHeaders: headers,
    }),
    anthropic: new Anthropic({
      apiKey: 'sk-x',
      baseURL: 'http://upstream.test',
      fetch,
      maxRetries: 0,
      defaultHeaders: headers,
    }),
  }
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 20))

describe('continueAfterCut', () => {
  it('anthropic: a cut after output is continued and the SDK gets the whole answer', async () => {
    const { anthropic, upstream, outcomes } = setup(['partial-then-cut', 'ok'])
    const message = await anthropic.messages
      .stream({ model: 'claude-test', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    expect(message.content.map((b) => (b.type === 'text' ? b.text : ''))).toEqual([answer])
    expect(message.stop_reason).toBe('end_turn')
    const second = JSON.parse(upstream.requests[1]?.body ?? '{}')
    expect(second.messages.at(-1)).toEqual({ role: 'assistant', content: 'The quick brown fox' })
    await settle()
    expect(outcomes[0]).toMatchObject({
      kind: 'committed',
      end: { kind: 'completed' },
      continuations: [{ result: 'spliced', receivedChars: 20, cause: 'partial-eof' }],
    })
  })

  it('openai chat (vllm-continue): the SDK gets the whole answer', async () => {
    const { openai, upstream } = setup(
      ['partial-then-cut', 'ok'],
      {},
      openaiChatWith({ continuation: 'vllm-continue' }),
    )
    const completion = await openai.chat.completions
      .stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
      .finalChatCompletion()
    expect(completion.choices[0]?.message.content).toBe(answer)
    const second = JSON.parse(upstream.requests[1]?.body ?? '{}')
    expect(second.continue_final_message).toBe(true)
    expect(second.add_generation_prompt).toBe(false)
  })

  it("without a pool (the caller's own credential): the continuation goes out with it", async () => {
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    const outcomes: RelayOutcome[] = []
    const fetch = createResilientFetch({
      fetch: upstream.fetch,
      policy: { continueAfterCut: true },
      onOutcome: (o) => outcomes.push(o),
    })
    const anthropic = new Anthropic({
      apiKey: 'sk-caller-own-1234567890',
      baseURL: 'http://upstream.test',
      fetch,
      maxRetries: 0,
      defaultHeaders: { 'x-fault-scenario': 's' },
    })
    const message = await anthropic.messages
      .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    expect(message.content.map((b) => (b.type === 'text' ? b.text : ''))).toEqual([answer])
    expect(upstream.requests).toHaveLength(2)
    await settle()
    expect(outcomes[0]).toMatchObject({
      keyId: null,
      continuations: [{ keyId: null, result: 'spliced' }],
    })
  })

  it('with an adapter that cannot continue: a TypeError naming it, not a silent no', () => {
    const adapter = {
      ...anthropicMessages,
      name: 'no-continuation',
      buildContinuation: undefined,
    } as unknown as StreamAdapter
    expect(() => setup(['partial-then-cut', 'ok'], {}, adapter)).toThrow(
      /no upstream adapter can continue a cut answer \(no-continuation has no buildContinuation/,
    )
  })
})

describe('continueAfterCut: usage is counted once', () => {
  /** Anthropic's faulty upstream: `message_start` reports 10 in / 1 out, the end 12 out. */
  const own = { inputTokens: 10, outputTokens: 1 }
  const continued = { inputTokens: 10, outputTokens: 12 }
  const sum = { inputTokens: 20, outputTokens: 13 }

  function expectCountedOnce(outcome: RelayOutcome | undefined) {
    expect(outcome).toMatchObject({ kind: 'committed', end: { kind: 'completed' } })
    if (outcome?.kind !== 'committed') return
    // The cut attempt's record keeps what its own upstream reported.
    expect(outcome.attempts.map((each) => each.usage)).toEqual([own])
    expect(outcome.continuations?.map((each) => each.usage)).toEqual([continued])
    // The answer's usage is the sum: attempts + continuations add up to it.
    expect(outcome.usage).toEqual(sum)
  }

  it('createResilientFetch: the cut attempt keeps its own usage, the outcome has the sum', async () => {
    const { anthropic, outcomes } = setup(['partial-then-cut', 'ok'])
    await anthropic.messages
      .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    await settle()
    expectCountedOnce(outcomes[0])
  })

  it('relay(): the cut attempt keeps its own usage, the outcome has the sum', async () => {
    const upstream = createFaultyUpstream({ scenarios: { s: ['partial-then-cut', 'ok'] } })
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      adapter: anthropicMessages,
      request: {
        url: 'http://upstream.test/v1/messages',
        body: {
          model: 'c',
          stream: true,
          max_tokens: 64,
          messages: [{ role: 'user', content: 'hi' }],
        },
      },
      policy: { continueAfterCut: true },
      attempt: ({ signal, request }) =>
        upstream.fetch(request?.url ?? '', {
          method: 'POST',
          headers: { 'x-fault-scenario': 's' },
          body: JSON.stringify(request?.body),
          signal,
        }),
    })
    expectCountedOnce(outcome)
  })
})

describe('continueAfterCut options', () => {
  const attempt = async () => new Response('')
  const policyError = (continueAfterCut: unknown) =>
    relay({
      sink: createRecordingSink(),
      adapter: anthropicMessages,
      attempt,
      policy: { continueAfterCut } as RelayPolicy,
    })

  it('true means the defaults; false and absent mean off', () => {
    expect(continueAfterCutDefaults).toEqual({
      maxContinuations: 1,
      maxAttempts: 2,
      timeoutMs: 30_000,
      maxReceivedChars: 262_144,
      nextRoute: false,
    })
    expect(Object.isFrozen(continueAfterCutDefaults)).toBe(true)
  })

  it.each([
    [
      { maxContinuations: 0 },
      RangeError,
      'continueAfterCut.maxContinuations must be a positive integer, got 0',
    ],
    [
      { maxAttempts: 1.5 },
      RangeError,
      'continueAfterCut.maxAttempts must be a positive integer, got 1.5',
    ],
    [
      { maxReceivedChars: -1 },
      RangeError,
      'continueAfterCut.maxReceivedChars must be a positive integer, got -1',
    ],
    [
      { timeoutMs: 0 },
      RangeError,
      'continueAfterCut.timeoutMs must be a positive number of milliseconds up to 2147483647, or Infinity to turn it off; got 0',
    ],
    [{ nextRoute: 'yes' }, TypeError, 'continueAfterCut.nextRoute must be a boolean, got string'],
    ['yes', TypeError, 'continueAfterCut must be a boolean or an object, got string'],
    [null, TypeError, 'continueAfterCut must be a boolean or an object, got null'],
  ])('%j is refused up front: %s', async (given, kind, message) => {
    const refused = policyError(given)
    await expect(refused).rejects.toThrow(kind)
    await expect(policyError(given)).rejects.toThrow(message)
  })

  it('Infinity turns the continuation budget off', async () => {
    const { anthropic } = setup(['partial-then-cut', 'ok'], {
      continueAfterCut: { timeoutMs: Number.POSITIVE_INFINITY },
    })
    const message = await anthropic.messages
      .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage()
    expect(message.content.map((b) => (b.type === 'text' ? b.text : ''))).toEqual([answer])
  })

  it('openaiChatWith refuses an unknown dialect, and without one is openaiChat itself', async () => {
    const { openaiChat } = await import('../../src/index.js')
    expect(() => openaiChatWith({ continuation: 'openai' as never })).toThrow(
      new RangeError(
        "continuation must be one of 'deepseek-prefix', 'mistral-prefix', 'vllm-continue', got openai",
      ),
    )
    expect(openaiChatWith({})).toBe(openaiChat)
    const vllm = openaiChatWith({ continuation: 'vllm-continue' })
    expect(vllm.name).toBe('openai-chat')
    expect(Object.isFrozen(vllm)).toBe(true)
  })
})
