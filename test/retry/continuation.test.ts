import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  openaiChatWith,
  type RelayOutcome,
  type RelayPolicy,
  type StreamAdapter,
} from '../../src/index.js'
import { createFaultyUpstream, type Scenario } from '../../src/testing/faulty-upstream.js'

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

  it('is off without an adapter that supports it: the honest error', async () => {
    const { anthropic } = setup(['partial-then-cut', 'ok'], {}, {
      ...anthropicMessages,
      name: 'no-continuation',
      buildContinuation: undefined,
    } as unknown as StreamAdapter)
    await expect(
      anthropic.messages
        .stream({ model: 'c', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
        .finalMessage(),
    ).rejects.toThrow(/incomplete/)
  })
})
