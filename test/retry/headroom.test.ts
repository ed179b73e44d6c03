import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { parseHeadroom, withHeadroom } from '../../src/retry/decisions/headroom.js'
import { estimateRequestCost } from '../../src/retry/request/request-cost.js'
import { runs } from '../support/runs.js'

const now = Date.parse('2026-12-02T04:00:00Z')
const names = [
  'x-ratelimit-remaining-requests',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-requests',
  'x-ratelimit-reset-tokens',
  ...['requests', 'tokens', 'input-tokens', 'output-tokens'].flatMap((limit) => [
    `anthropic-ratelimit-${limit}-remaining`,
    `anthropic-ratelimit-${limit}-reset`,
  ]),
]

describe('parseHeadroom', () => {
  it('reads OpenAI remaining counts and reset durations', () => {
    const headers = new Headers({
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-reset-requests': '6m0s',
      'x-ratelimit-remaining-tokens': '149984',
      'x-ratelimit-reset-tokens': '20ms',
    })
    expect(parseHeadroom(headers, now)).toStrictEqual({
      requestsRemaining: 59,
      requestsResetMs: 360_000,
      tokensRemaining: 149_984,
      tokensResetMs: 20,
    })
  })

  it('reads Anthropic timestamps as milliseconds from now; split token budgets are summed, a past reset is 0', () => {
    const headers = new Headers({
      'anthropic-ratelimit-requests-remaining': '49',
      'anthropic-ratelimit-requests-reset': '2026-12-02T04:00:30Z',
      'anthropic-ratelimit-input-tokens-remaining': '30000',
      'anthropic-ratelimit-input-tokens-reset': '2026-12-02T04:00:10Z',
      'anthropic-ratelimit-output-tokens-remaining': '8000',
      'anthropic-ratelimit-output-tokens-reset': '2026-12-02T03:59:00Z',
    })
    expect(parseHeadroom(headers, now)).toStrictEqual({
      requestsRemaining: 49,
      requestsResetMs: 30_000,
      tokensRemaining: 38_000,
      tokensResetMs: 10_000,
    })
    // The combined budget binds when it is smaller than the split ones summed.
    headers.set('anthropic-ratelimit-tokens-remaining', '1000')
    headers.set('anthropic-ratelimit-tokens-reset', '2026-12-02T04:00:05Z')
    expect(parseHeadroom(headers, now)).toMatchObject({
      tokensRemaining: 1000,
      tokensResetMs: 5000,
    })
  })

  it('drops malformed, negative and absurd values, and states nothing when nothing is usable', () => {
    const headers = new Headers({
      'x-ratelimit-remaining-requests': '-1',
      'x-ratelimit-remaining-tokens': '1e400',
      'x-ratelimit-reset-tokens': '99999h',
      'anthropic-ratelimit-requests-remaining': 'lots',
    })
    expect(parseHeadroom(headers, now)).toBeUndefined()
    headers.set('x-ratelimit-remaining-tokens', '5000')
    expect(parseHeadroom(headers, now)).toStrictEqual({ tokensRemaining: 5000 })
    expect(parseHeadroom(new Headers({ 'x-ratelimit-reset-requests': '1s' }), now)).toBeUndefined()
  })

  it('only successes and rate limits carry headroom', () => {
    const headers = new Headers({ 'x-ratelimit-remaining-requests': '0' })
    expect(withHeadroom({ kind: 'success' }, headers)).toStrictEqual({
      kind: 'success',
      headroom: { requestsRemaining: 0 },
    })
    expect(withHeadroom({ kind: 'rate-limited', retryAfterMs: 5 }, headers)).toStrictEqual({
      kind: 'rate-limited',
      retryAfterMs: 5,
      headroom: { requestsRemaining: 0 },
    })
    expect(withHeadroom({ kind: 'server-error' }, headers)).toStrictEqual({ kind: 'server-error' })
    expect(withHeadroom({ kind: 'success' }, undefined)).toStrictEqual({ kind: 'success' })
  })

  it('parsing headroom never throws and yields only finite, non-negative, bounded numbers, for arbitrary header values', () => {
    // Header values a Headers object accepts: no NUL, CR or LF; leading/trailing blanks are trimmed.
    const value = fc.oneof(
      fc.string({ maxLength: 40 }).map((s) => s.replace(/[\0\r\n]/g, '')),
      fc.double().map(String),
      fc.integer().map(String),
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      fc.constantFrom('0', '0s', '6m0s', '1h2m3.5s', '20ms', 'NaN', 'Infinity', '-0', '1e999'),
    )
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom(...names), value), (entries) => {
        const headroom = parseHeadroom(new Headers(entries), now)
        if (headroom === undefined) return
        for (const field of Object.values(headroom)) {
          expect(Number.isSafeInteger(field)).toBe(true)
          expect(field).toBeGreaterThanOrEqual(0)
        }
        for (const reset of [headroom.requestsResetMs, headroom.tokensResetMs]) {
          if (reset !== undefined) expect(reset).toBeLessThanOrEqual(2 * 86_400_000)
        }
      }),
      { numRuns: runs(300) },
    )
  })
})

describe('estimateRequestCost', () => {
  it('is the JSON length over four plus the output limit the request states, in each protocol', () => {
    const base = { model: 'm', messages: [{ role: 'user', content: 'x'.repeat(400) }] }
    const input = Math.ceil(JSON.stringify(base).length / 4)
    const cost = (extra: Record<string, unknown>) =>
      estimateRequestCost({ url: undefined, body: { ...base, ...extra } })?.tokens
    expect(cost({})).toBe(input)
    const withLimit = (extra: Record<string, unknown>) =>
      Math.ceil(JSON.stringify({ ...base, ...extra }).length / 4)
    expect(cost({ max_tokens: 1000 })).toBe(withLimit({ max_tokens: 1000 }) + 1000)
    expect(cost({ max_completion_tokens: 500 })).toBe(
      withLimit({ max_completion_tokens: 500 }) + 500,
    )
    expect(cost({ max_output_tokens: 64 })).toBe(withLimit({ max_output_tokens: 64 }) + 64)
    const gemini = { generationConfig: { maxOutputTokens: 256 } }
    expect(cost(gemini)).toBe(withLimit(gemini) + 256)
    expect(estimateRequestCost(undefined)).toBeUndefined()
  })

  it('writes no JSON until a pool reads the cost, and then once per body', () => {
    let written = 0
    const body = {
      model: 'm',
      toJSON: () => {
        written++
        return { model: 'm' }
      },
    }
    const cost = estimateRequestCost({ url: undefined, body })
    expect(written).toBe(0)
    expect(cost?.tokens).toBe(Math.ceil(JSON.stringify({ model: 'm' }).length / 4))
    expect(cost?.tokens).toBe(cost?.tokens)
    estimateRequestCost({ url: undefined, body })?.tokens
    expect(written).toBe(1)
  })
})
