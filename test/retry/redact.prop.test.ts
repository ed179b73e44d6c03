import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { createMemoryKeyPool, openaiChat, type RelayPolicy, relay } from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { runs } from '../support/runs.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

/**
 * Invariant 17: every secret the library put on an attempt is redacted by value from
 * everything that leaves it, whatever the secret looks like (not only `sk-…` shapes).
 */

// Header-safe characters, with at least one that is not a letter: no English word.
const secrets = fc
  .stringMatching(/^[\x21-\x7e]{8,40}$/)
  .filter((s) => /[^A-Za-z]/.test(s) && !s.includes('redacted'))

const chunk = (delta: object) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`
const errorFrame = (type: string, message: string) =>
  `data: ${JSON.stringify({ error: { type, message } })}\n\n`
const json = { 'content-type': 'application/json' }

/** Where an upstream quotes the key it was sent. */
const places: Record<string, (secret: string) => Behaviour> = {
  'a 400 JSON error': (secret) => ({
    status: 400,
    headers: json,
    steps: [{ bytes: JSON.stringify({ error: { message: `bad key ${secret}` } }) }],
  }),
  "a pool key's 401": (secret) => ({
    status: 401,
    headers: json,
    steps: [
      { bytes: JSON.stringify({ error: { message: `Incorrect API key provided: ${secret}` } }) },
    ],
  }),
  'an HTML 500 page': (secret) => ({
    status: 500,
    headers: { 'content-type': 'text/html' },
    steps: [{ bytes: `<html><title>failed for ${secret}</title></html>` }],
  }),
  'a retryable error frame before output': (secret) => ({
    steps: [{ bytes: errorFrame('server_error', `key ${secret} failed`) }],
  }),
  'a fatal error frame before output': (secret) => ({
    steps: [{ bytes: errorFrame('invalid_request_error', `key ${secret} refused`) }],
  }),
  'an error frame after output': (secret) => ({
    steps: [
      { bytes: chunk({ role: 'assistant', content: 'Hel' }) },
      { bytes: errorFrame('server_error', `key ${secret} broke`) },
    ],
  }),
  'a message cut at its bound inside the key': (secret) => ({
    status: 400,
    headers: json,
    steps: [
      {
        bytes: JSON.stringify({
          error: { message: `${'x'.repeat(480 + (secret.length % 17))} ${secret}` },
        }),
      },
    ],
  }),
}

/** Every string value in `value`, at any depth (object keys left out). */
function stringsOf(value: unknown): string[] {
  if (typeof value === 'string') return [value]
  if (typeof value !== 'object' || value === null) return []
  return Object.values(value).flatMap(stringsOf)
}

const policy: RelayPolicy = { maxAttempts: 2, backoff: { baseMs: 1, maxMs: 2 } }

describe('redaction by value', () => {
  it('a leased secret of any shape, quoted anywhere by the upstream, reaches no client body, error frame, outcome or hook', async () => {
    await fc.assert(
      fc.asyncProperty(secrets, fc.constantFrom(...Object.keys(places)), async (secret, place) => {
        const pool = createMemoryKeyPool([{ id: 'only', secret }])
        const upstream = scriptedUpstream([(places[place] as (s: string) => Behaviour)(secret)])
        const sink = createRecordingSink()
        const seen: unknown[] = []
        const record = (payload: unknown) => seen.push(payload)
        const outcome = await relay({
          sink,
          pool,
          adapter: openaiChat,
          attempt: upstream.attempt,
          policy,
          hooks: {
            onAttempt: record,
            onRetry: record,
            onCommit: record,
            onGiveUp: record,
            onOutcome: record,
          },
        })
        const left = [sink.text, JSON.stringify(outcome), JSON.stringify(seen)].join('\n')
        const escaped = JSON.stringify(secret).slice(1, -1)
        expect(left).not.toContain(secret)
        expect(left).not.toContain(escaped)
        // Not even its first characters, where a message was cut at its bound: in what the
        // client got and in every string the outcome and hooks carry. (Not in their JSON
        // punctuation and key names, which are the library's own: a secret `"proto!!` would
        // find `"protocol":` there.)
        const words = [sink.text, ...stringsOf(outcome), ...stringsOf(seen)].join('\n')
        expect(words).not.toContain(secret.slice(0, 6))
      }),
      { numRuns: runs(150) },
    )
  })
})
