import { createOpenAI } from '@ai-sdk/openai'
import { generateText, streamText } from 'ai'
import { afterEach, describe, expect, it } from 'vitest'
import { createMemoryKeyPool, createResilientFetch } from '../../src/index.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

/**
 * The README and docs/fetch.md say the Vercel AI SDK works with `createResilientFetch` as its
 * provider `fetch`, chat and responses models alike: an empty first stream is retried on the
 * next key before anything reaches the SDK, which reads one whole answer.
 */

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

async function providerOver(scenario: Scenario) {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const url = await upstream.listen()
  cleanups.push(() => upstream.close())
  const pool = createMemoryKeyPool([
    { id: 'key-a', secret: 'sk-vercel-a' },
    { id: 'key-b', secret: 'sk-vercel-b' },
  ])
  const openai = createOpenAI({
    baseURL: `${url}/v1`,
    apiKey: 'sk-ignored',
    headers: { 'x-fault-scenario': 's' },
    fetch: createResilientFetch({ pool, policy: { backoff: { baseMs: 5, maxMs: 20 } } }),
  })
  return { openai, upstream }
}

describe('the Vercel AI SDK with createResilientFetch as its provider fetch', () => {
  it.each(['chat', 'responses'] as const)(
    '%s model, streaming: an empty first stream is retried on the next key, the SDK reads one whole answer',
    async (kind) => {
      const { openai, upstream } = await providerOver(['empty', 'ok'])
      const result = streamText({ model: openai[kind]('m'), prompt: 'hi', maxRetries: 0 })
      const text = await result.text
      expect(text.length).toBeGreaterThan(0)
      expect(await result.finishReason).toBe('stop')
      expect(upstream.requests.map((request) => request.fault)).toEqual(['empty', 'ok'])
      expect(upstream.requests.map((request) => request.streaming)).toEqual([true, true])
      expect(new Set(upstream.requests.map((request) => request.path))).toEqual(
        new Set([kind === 'chat' ? '/v1/chat/completions' : '/v1/responses']),
      )
    },
  )

  it.each(['chat', 'responses'] as const)(
    '%s model, whole: an empty first answer is retried, the SDK reads the answer',
    async (kind) => {
      const { openai, upstream } = await providerOver(['empty', 'ok'])
      const result = await generateText({ model: openai[kind]('m'), prompt: 'hi', maxRetries: 0 })
      expect(result.text.length).toBeGreaterThan(0)
      expect(upstream.requests.map((request) => request.streaming)).toEqual([false, false])
    },
  )
})
