import { describe, expect, it } from 'vitest'
import { fitContextWindow } from '../../src/index.js'
import {
  contextWindowFitDefaults,
  normalizeContextWindowFit,
} from '../../src/retry/decisions/context-window.js'

const overflow = 'input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000'
const url = 'https://api.anthropic.com/v1/messages'

function anthropic(extra: Record<string, unknown>): {
  url: string
  body: Record<string, unknown>
} {
  return {
    url,
    body: {
      model: 'claude-sonnet-4-5',
      max_tokens: 21333,
      messages: [{ role: 'user', content: 'hi' }],
      ...extra,
    },
  }
}

describe('fitContextWindow with extended thinking', () => {
  it('without thinking, lowers max_tokens to the window (unchanged rule)', () => {
    const fitted = fitContextWindow('anthropic-messages', anthropic({}), overflow)
    expect(fitted?.body.max_tokens).toBe(10_736)
    expect(fitted?.body.thinking).toBeUndefined()
  })

  it('lowers the thinking budget too, so max_tokens stays above it and the answer keeps the floor', () => {
    const request = anthropic({ thinking: { type: 'enabled', budget_tokens: 16_000 } })
    const fitted = fitContextWindow('anthropic-messages', request, overflow)
    expect(fitted?.body).toMatchObject({
      max_tokens: 10_736,
      thinking: { type: 'enabled', budget_tokens: 10_736 - 3000 },
    })
    if (fitted === undefined) throw new Error('expected a fitted request')
    const { max_tokens, thinking } = fitted.body as {
      max_tokens: number
      thinking: { budget_tokens: number }
    }
    expect(max_tokens).toBeGreaterThan(thinking.budget_tokens)
    expect(thinking.budget_tokens).toBeGreaterThanOrEqual(1024)
    // The request as given is untouched.
    expect(request.body.thinking).toEqual({ type: 'enabled', budget_tokens: 16_000 })
  })

  it('keeps a thinking budget that already leaves the floor for the answer', () => {
    const request = anthropic({ thinking: { type: 'enabled', budget_tokens: 4000 } })
    const fitted = fitContextWindow('anthropic-messages', request, overflow)
    expect(fitted?.body).toMatchObject({
      max_tokens: 10_736,
      thinking: { type: 'enabled', budget_tokens: 4000 },
    })
  })

  it('gives up (the original error stands) when thinking would fall below 1,024 tokens', () => {
    // 200000 − 195000 − 1024 = 3976 tokens: the floor of 3000 for the answer leaves 976 to think.
    const tight = 'input length and `max_tokens` exceed context limit: 195000 + 21333 > 200000'
    const request = anthropic({ thinking: { type: 'enabled', budget_tokens: 16_000 } })
    expect(fitContextWindow('anthropic-messages', request, tight)).toBeUndefined()
    // Without thinking the same overflow still fits above the floor.
    expect(fitContextWindow('anthropic-messages', anthropic({}), tight)?.body.max_tokens).toBe(3976)
  })

  it('honours minThinkingTokens and floorTokens', () => {
    const request = anthropic({ thinking: { type: 'enabled', budget_tokens: 16_000 } })
    expect(
      fitContextWindow('anthropic-messages', request, overflow, { minThinkingTokens: 8000 }),
    ).toBeUndefined()
    expect(
      fitContextWindow('anthropic-messages', request, overflow, { floorTokens: 1000 })?.body
        .thinking,
    ).toEqual({ type: 'enabled', budget_tokens: 9736 })
  })

  it('leaves thinking without a numeric budget alone', () => {
    const request = anthropic({ thinking: { type: 'disabled' } })
    expect(fitContextWindow('anthropic-messages', request, overflow)?.body).toMatchObject({
      max_tokens: 10_736,
      thinking: { type: 'disabled' },
    })
  })
})

describe('normalizeContextWindowFit', () => {
  it('merges with the defaults', () => {
    expect(normalizeContextWindowFit()).toEqual(contextWindowFitDefaults)
    expect(normalizeContextWindowFit({ floorTokens: 2000, marginTokens: 0 })).toEqual({
      marginTokens: 0,
      floorTokens: 2000,
      minThinkingTokens: 1024,
    })
  })

  it.each([
    [{ marginTokens: -1 }, 'fitContextWindow.marginTokens must be a non-negative integer, got -1'],
    [{ floorTokens: 0 }, 'fitContextWindow.floorTokens must be a positive integer, got 0'],
    [
      { minThinkingTokens: 1.5 },
      'fitContextWindow.minThinkingTokens must be a positive integer, got 1.5',
    ],
  ])('rejects %j with an exact message', (options, message) => {
    expect(() => normalizeContextWindowFit(options)).toThrow(new RangeError(message))
  })
})
