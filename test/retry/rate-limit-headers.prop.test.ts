import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { rateLimitDelay } from '../../src/retry/decisions/rate-limit-headers.js'
import { runs } from '../support/runs.js'

const now = Date.parse('2026-11-29T12:00:00Z')
const century = 100 * 365 * 86_400_000

/** A non-negative decimal as an upstream may write it: digits, a fraction, an exponent. */
const decimal = fc
  .tuple(
    fc.stringMatching(/^\d{1,40}$/),
    fc.option(fc.stringMatching(/^\d{1,6}$/), { nil: undefined }),
    fc.option(fc.tuple(fc.constantFrom('e', 'E', 'e+', 'e-'), fc.integer({ min: 0, max: 400 })), {
      nil: undefined,
    }),
  )
  .map(
    ([whole, fraction, exponent]) =>
      `${whole}${fraction === undefined ? '' : `.${fraction}`}${exponent === undefined ? '' : `${exponent[0]}${exponent[1]}`}`,
  )

describe('rate-limit waits', () => {
  it('every decimal wait header is a finite wait of at most a century, never ignored, and what it says when shorter', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('retry-after-ms', 'retry-after', 'anthropic-ratelimit-unified-5h-reset'),
        decimal,
        (name, value) => {
          const headers = new Headers({ [name]: value })
          if (name.startsWith('anthropic-')) {
            headers.set('anthropic-ratelimit-unified-status', 'rejected')
            headers.set('anthropic-ratelimit-unified-5h-status', 'rejected')
          }
          const delay = rateLimitDelay(headers, now)
          expect(delay).toBeDefined()
          expect(Number.isSafeInteger(delay)).toBe(true)
          expect(delay).toBeGreaterThanOrEqual(0)
          expect(delay).toBeLessThanOrEqual(century)
          const unit = name === 'retry-after-ms' ? 1 : 1000
          const said = name.startsWith('anthropic-')
            ? Number(value) * 1000 - now
            : Number(value) * unit
          if (said >= 0 && said < century)
            expect(Math.abs((delay ?? 0) - said)).toBeLessThanOrEqual(1)
        },
      ),
      { numRuns: runs(300) },
    )
  })
})
