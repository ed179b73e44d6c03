import { describe, expect, it } from 'vitest'
import {
  createHedging,
  createMemoryKeyPool,
  type KeyStateEvent,
  openaiChat,
  type RelayHooks,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

/**
 * What hooks and outcomes carry, at run time: over every kind of attempt (success, retries,
 * rate limits, auth failures that echo the key, errors passed through, timeouts), nothing a
 * hook or an outcome receives holds a key's secret or the request body (the end user's
 * prompt). Error messages are the upstream's own words, sanitised with secrets redacted: an
 * upstream that quotes the prompt in its error is quoted in turn, as the client sees it.
 */

const secretA = 'sk-live-AAAAAAAAAAAAAAAAAAAAAAAA'
const secretB = 'sk-live-BBBBBBBBBBBBBBBBBBBBBBBB'
const prompt = 'my-very-private-prompt-0421'

const ok: Behaviour = { steps: [{ bytes: fixtureBytes('openai-chat/text.sse') }] }
const scripts: Record<string, Behaviour[]> = {
  success: [ok],
  'auth failure echoing the key, then ok': [
    {
      status: 401,
      steps: [{ bytes: `{"error":{"message":"Incorrect API key provided: ${secretA}"}}` }],
    },
    ok,
  ],
  'rate limited, then ok': [{ status: 429, headers: { 'retry-after': '0' } }, ok],
  'a refused request whose error quotes a key': [
    {
      status: 400,
      steps: [{ bytes: `{"error":{"message":"bad input sent with ${secretB}"}}` }],
    },
  ],
  'a stalled attempt hedged by another key': [
    { steps: [{ bytes: 'data: {"choices":[]}\n\n' }, { hang: true }] },
    { steps: [{ wait: 5 }, { bytes: fixtureBytes('openai-chat/text.sse') }] },
  ],
  'empty streams only': [{ steps: [{ bytes: 'data: {"choices":[]}\n\n' }] }],
  'an error frame quoting the key': [
    {
      steps: [
        { bytes: `data: {"error":{"message":"key ${secretA} revoked","type":"server_error"}}\n\n` },
      ],
    },
  ],
}

describe('hook payloads and outcomes hold no secret and no prompt', () => {
  it.each(Object.entries(scripts))('%s', async (name, script) => {
    const seen: unknown[] = []
    const record = (payload: unknown) => {
      seen.push(payload)
    }
    const hooks: RelayHooks = {
      onAttempt: record,
      onRetry: record,
      onHedge: record,
      onCommit: record,
      onGiveUp: record,
      onOutcome: record,
    }
    const pool = createMemoryKeyPool(
      [
        { id: 'a', secret: secretA },
        { id: 'b', secret: secretB },
      ],
      { onKeyState: (event: KeyStateEvent) => seen.push(event) },
    )
    const upstream = scriptedUpstream(script)
    const outcome = await relay({
      sink: createRecordingSink(),
      pool,
      adapter: openaiChat,
      attempt: upstream.attempt,
      hooks,
      request: {
        url: 'http://upstream.test/v1/chat/completions',
        body: { messages: [{ role: 'user', content: prompt }], stream: true },
      },
      policy: {
        backoff: { baseMs: 1 },
        maxAttempts: 2,
        hedge: createHedging({ afterMs: 20, budget: 1 }),
        peek: { firstOutputTimeoutMs: 2_000 },
      },
    })
    seen.push(outcome, await pool.stats(), pool.toJSON())
    const text = JSON.stringify(seen)
    expect(seen.length).toBeGreaterThan(3)
    if (name.includes('hedged')) {
      expect(seen.some((payload) => (payload as { hedgeOf?: number }).hedgeOf === 1)).toBe(true)
    }
    expect(text).not.toContain(secretA)
    expect(text).not.toContain(secretB)
    expect(text).not.toContain(prompt)
  })
})
