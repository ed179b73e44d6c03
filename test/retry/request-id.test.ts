import { describe, expect, it, vi } from 'vitest'
import { createResilientFetch, type RelayOutcome } from '../../src/index.js'
import { createFaultyUpstream, type Scenario } from '../../src/testing/faulty-upstream.js'

const url = 'http://upstream.test/v1/chat/completions'
const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

function setup(scenario: Scenario, correlationIds?: boolean) {
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

  it('sends no id of its own with correlationIds: false, plain or streaming', async () => {
    const { request, sentIds } = setup(['overloaded', 'ok'], false)
    await request(false)
    expect(sentIds()).toEqual([undefined, undefined])
  })
})
