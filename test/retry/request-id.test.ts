import { describe, expect, it, vi } from 'vitest'
import { isFirstPartyApi } from '../../src/advanced.js'
import { createResilientFetch, type RelayOutcome } from '../../src/index.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

// The provider's own API: the only host sent the library's per-attempt ids (the faulty
// upstream's in-process fetch answers any host).
const firstParty = 'https://api.openai.com/v1/chat/completions'
const thirdParty = 'https://llm.example.com/v1/chat/completions'
const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

function setup(scenario: Scenario, correlationIds?: boolean, url = firstParty) {
  const upstream = createFaultyUpstream({ scenarios: { s: scenario } })
  const outcomes: RelayOutcome[] = []
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    onOutcome: (outcome) => outcomes.push(outcome),
    policy: {
      backoff: { baseMs: 1 },
      ...(correlationIds === undefined ? {} : { correlationIds }),
    },
  })
  const request = (stream: boolean, headers: Record<string, string> = {}) =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-fault-scenario': 's', ...headers },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream }),
    })
  const sentIds = () => upstream.requests.map((r) => r.headers['x-client-request-id'])
  return { upstream, request, sentIds, outcomes }
}

describe('createResilientFetch request ids', () => {
  it('keeps the caller’s x-client-request-id on every streaming attempt', async () => {
    const { request, sentIds } = setup(['empty', 'error-frame', 'ok'])
    const response = await request(true, { 'x-client-request-id': 'caller-42' })
    await response.text()
    expect(sentIds()).toEqual(['caller-42', 'caller-42', 'caller-42'])
  })

  it('keeps the caller’s x-client-request-id on every plain attempt', async () => {
    const { request, sentIds } = setup(['overloaded', 'ok'])
    const response = await request(false, { 'x-client-request-id': 'caller-43' })
    expect(response.status).toBe(200)
    expect(sentIds()).toEqual(['caller-43', 'caller-43'])
  })

  it('gives every plain attempt its own id when the caller set none', async () => {
    const { request, sentIds } = setup(['overloaded', 'ok'])
    const response = await request(false)
    expect(response.status).toBe(200)
    const [first, second] = sentIds()
    expect(first).toMatch(uuid)
    expect(second).toMatch(uuid)
    expect(first).not.toBe(second)
  })

  it('gives every streaming attempt the id its attempt record reports when the caller set none', async () => {
    const { request, sentIds, outcomes } = setup(['empty', 'ok'])
    await (await request(true)).text()
    const ids = sentIds()
    expect(ids).toHaveLength(2)
    for (const id of ids) expect(id).toMatch(uuid)
    await vi.waitFor(() => expect(outcomes[0]?.attempts.map((a) => a.requestId)).toEqual(ids))
  })

  it('x-client-request-id only to the first-party API: a third-party OpenAI-compatible host gets none of the library’s ids, plain or streaming, while the records keep them', async () => {
    const { request, sentIds, outcomes } = setup(['overloaded', 'ok'], undefined, thirdParty)
    expect((await request(false)).status).toBe(200)
    await (await request(true)).text()
    expect(sentIds()).toEqual([undefined, undefined, undefined])
    await vi.waitFor(() => expect(outcomes).toHaveLength(2))
    for (const outcome of outcomes) {
      for (const attempt of outcome.attempts) expect(attempt.requestId).toMatch(uuid)
    }
  })

  it('a caller’s own x-client-request-id reaches a third-party host on every attempt', async () => {
    const { request, sentIds } = setup(['overloaded', 'ok'], undefined, thirdParty)
    await request(false, { 'x-client-request-id': 'caller-44' })
    expect(sentIds()).toEqual(['caller-44', 'caller-44'])
  })

  it('sends no id of its own with correlationIds: false, plain or streaming', async () => {
    const { request, sentIds } = setup(['overloaded', 'ok'], false)
    await request(false)
    expect(sentIds()).toEqual([undefined, undefined])
  })
})

describe('isFirstPartyApi', () => {
  it.each([
    ['https://api.openai.com/v1/chat/completions', true],
    ['https://API.Anthropic.com/v1/messages', true],
    ['http://api.openai.com/v1/chat/completions', false],
    ['https://api.openai.com.evil.test/v1/chat/completions', false],
    ['https://openrouter.ai/api/v1/chat/completions', false],
    ['https://generativelanguage.googleapis.com/v1beta/models/m:streamGenerateContent', false],
    ['not a url', false],
  ])('%s → %s', (url, expected) => {
    expect(isFirstPartyApi(url)).toBe(expected)
  })
})
