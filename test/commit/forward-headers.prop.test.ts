import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type ForwardHeadersPolicy } from '../../src/index.js'
import { forwardableHeaders } from '../../src/advanced.js'

const never = [
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-authenticate',
  'content-length',
  'content-encoding',
  'content-type',
  'set-cookie',
]
const accountIds = ['openai-organization', 'openai-project', 'anthropic-organization-id']
const rateLimits = ['x-ratelimit-remaining-tokens', 'anthropic-ratelimit-requests-limit']
const known = ['x-request-id', 'request-id', 'openai-processing-ms', 'retry-after', 'cf-ray']

const headerName = fc.oneof(
  fc.constantFrom(...never, ...accountIds, ...rateLimits, ...known),
  fc.stringMatching(/^x-[a-z]{1,6}$/),
)
const headerValue = fc.stringMatching(/^[a-z0-9 ,=-]{0,12}$/)

/** Upstream headers; `connection` may name some of the others as hop-by-hop. */
const upstreamHeaders = fc
  .record({
    entries: fc.array(fc.tuple(headerName, headerValue), { maxLength: 16 }),
    hop: fc.array(headerName, { maxLength: 3 }),
  })
  .map(({ entries, hop }) => {
    const headers = new Headers()
    for (const [name, value] of entries) headers.set(name, value)
    if (hop.length > 0) headers.set('connection', hop.join(', '))
    return headers
  })

const policy: fc.Arbitrary<ForwardHeadersPolicy | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.constant('none' as const),
  fc.constant(() => true),
  fc.record(
    {
      allow: fc.array(fc.oneof(headerName, fc.constant(/^x-/), fc.constant(/-id$/g)), {
        maxLength: 6,
      }),
      rateLimit: fc.boolean(),
    },
    { requiredKeys: [] },
  ),
)

function namedByConnection(headers: Headers): string[] {
  return (headers.get('connection') ?? '').split(',').map((name) => name.trim())
}

describe('forwardableHeaders properties', () => {
  it('under every policy, only upstream headers pass, unchanged, and never hop-by-hop, framing or cookies', () => {
    fc.assert(
      fc.property(upstreamHeaders, policy, (headers, chosen) => {
        const out = forwardableHeaders(headers, chosen)
        const hop = namedByConnection(headers)
        for (const [name, value] of out) {
          expect(headers.get(name)).toBe(value)
          expect(never).not.toContain(name)
          expect(hop).not.toContain(name)
        }
      }),
      { numRuns: 300 },
    )
  })

  it('by default, no upstream account id and no rate-limit header ever passes', () => {
    fc.assert(
      fc.property(upstreamHeaders, (headers) => {
        const names = [...forwardableHeaders(headers).keys()]
        for (const name of names) {
          expect(accountIds).not.toContain(name)
          expect(name).not.toMatch(/ratelimit/)
        }
      }),
      { numRuns: 300 },
    )
  })
})
