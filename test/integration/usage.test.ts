import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createResilientFetch,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type RelayOutcome,
  type StreamAdapter,
} from '../../src/index.js'
import {
  anthropicUsage,
  chatUsage,
  geminiUsage,
  mergeUsage,
  responsesUsage,
} from '../../src/protocols/usage.js'
import { createFaultyUpstream, type Scenario } from '../../src/testing/faulty-upstream.js'

/**
 * Token usage in every outcome: each shipped adapter reads what its protocol reports, in a
 * stream and in a whole answer, and the relay puts the answer's usage in the outcome and each
 * attempt's in its record. The faulty upstream reports 10 input and 12 output tokens in
 * every protocol's own way (Anthropic in two steps).
 */

const endpoints: readonly [StreamAdapter, string, (stream: boolean) => string][] = [
  [
    openaiChat,
    'https://api.test/v1/chat/completions',
    () => 'https://api.test/v1/chat/completions',
  ],
  [openaiResponses, 'https://api.test/v1/responses', () => 'https://api.test/v1/responses'],
  [anthropicMessages, 'https://api.test/v1/messages', () => 'https://api.test/v1/messages'],
  [
    geminiGenerateContent,
    'gemini',
    (stream) =>
      stream
        ? 'https://api.test/v1beta/models/m:streamGenerateContent?alt=sse'
        : 'https://api.test/v1beta/models/m:generateContent',
  ],
]

async function outcomeOf(
  adapter: StreamAdapter,
  url: string,
  stream: boolean,
  scenario: Scenario,
): Promise<RelayOutcome> {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  let outcome: RelayOutcome | undefined
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    adapter,
    policy: { backoff: { baseMs: 1, maxMs: 2 } },
    onOutcome: (ended) => {
      outcome = ended
    },
  })
  const body =
    adapter === geminiGenerateContent
      ? { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }
      : {
          model: 'm',
          stream,
          messages: [{ role: 'user', content: 'hi' }],
          input: 'hi',
          max_tokens: 8,
        }
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
    body: JSON.stringify(body),
  })
  await response.text()
  await expect.poll(() => outcome).toBeDefined()
  return outcome as RelayOutcome
}

describe('token usage in the outcome, as the upstream reported it', () => {
  for (const [adapter, , urlFor] of endpoints) {
    describe(adapter.name, () => {
      it.each([true, false])('stream: %s — 10 input and 12 output tokens', async (stream) => {
        const outcome = await outcomeOf(adapter, urlFor(stream), stream, ['ok'])
        expect(outcome).toMatchObject({
          kind: 'committed',
          usage: { inputTokens: 10, outputTokens: 12 },
        })
        if (outcome.kind !== 'committed') return
        expect(outcome.attempts.at(-1)?.usage).toEqual(outcome.usage)
      })
    })
  }

  it('a failed attempt keeps what it was billed for where the protocol says: Anthropic’s message_start before an error frame', async () => {
    const outcome = await outcomeOf(anthropicMessages, 'https://api.test/v1/messages', true, [
      'error-frame',
      'ok',
    ])
    expect(outcome.kind).toBe('committed')
    expect(outcome.attempts.map((attempt) => attempt.usage)).toEqual([
      { inputTokens: 10, outputTokens: 1 },
      { inputTokens: 10, outputTokens: 12 },
    ])
  })

  it('an attempt that reported nothing has no usage', async () => {
    const outcome = await outcomeOf(openaiChat, 'https://api.test/v1/chat/completions', true, [
      'empty',
      'ok',
    ])
    expect(outcome.attempts[0]?.usage).toBeUndefined()
    expect(outcome.attempts[1]?.usage).toEqual({ inputTokens: 10, outputTokens: 12 })
  })
})

describe('usage readers', () => {
  it('read each protocol’s fields, cached and reasoning tokens included', () => {
    expect(
      chatUsage({
        prompt_tokens: 100,
        completion_tokens: 40,
        prompt_tokens_details: { cached_tokens: 64 },
        completion_tokens_details: { reasoning_tokens: 30 },
      }),
    ).toEqual({ inputTokens: 100, outputTokens: 40, cachedInputTokens: 64, reasoningTokens: 30 })
    expect(
      responsesUsage({
        input_tokens: 100,
        output_tokens: 40,
        input_tokens_details: { cached_tokens: 64 },
        output_tokens_details: { reasoning_tokens: 30 },
      }),
    ).toEqual({ inputTokens: 100, outputTokens: 40, cachedInputTokens: 64, reasoningTokens: 30 })
    // Anthropic's input_tokens leaves the cache out: every input token is counted.
    expect(
      anthropicUsage({
        input_tokens: 10,
        output_tokens: 5,
        cache_read_input_tokens: 64,
        cache_creation_input_tokens: 26,
      }),
    ).toEqual({
      inputTokens: 100,
      outputTokens: 5,
      cachedInputTokens: 64,
      cacheCreationInputTokens: 26,
    })
    // Gemini's candidates leave the thoughts out: every output token is counted.
    expect(
      geminiUsage({
        promptTokenCount: 100,
        candidatesTokenCount: 10,
        thoughtsTokenCount: 30,
        cachedContentTokenCount: 64,
      }),
    ).toEqual({ inputTokens: 100, outputTokens: 40, cachedInputTokens: 64, reasoningTokens: 30 })
  })

  it('ignore what is not a count, and report nothing when nothing was reported', () => {
    expect(chatUsage(null)).toBeUndefined()
    expect(chatUsage({ prompt_tokens: -1, completion_tokens: 1.5 })).toBeUndefined()
    expect(geminiUsage({ promptTokenCount: '10' })).toBeUndefined()
  })

  it('merge steps of one stream: a later step never lowers a count', () => {
    expect(
      mergeUsage({ inputTokens: 100, outputTokens: 1 }, { inputTokens: 10, outputTokens: 12 }),
    ).toEqual({
      inputTokens: 100,
      outputTokens: 12,
    })
    expect(mergeUsage(undefined, 'garbage' as never)).toBeUndefined()
  })
})
