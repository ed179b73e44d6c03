import { afterEach, describe, expect, it } from 'vitest'
import { runClient } from '../../src/cli/client.js'
import {
  buildClientRequest,
  type ChaosProtocol,
  chaosProtocols,
  protocolAdapters,
} from '../../src/cli/client-request.js'
import { judgeObservation } from '../../src/cli/judge.js'
import { chaosAnswer, chaosReasoning, chaosScenarios } from '../../src/cli/scenarios.js'
import { type ServedFetch, serveFetch } from '../../src/node.js'
import { chaosMarker, parseChaosMarker } from '../../src/testing/chaos-marker.js'
import { createFaultyUpstream, type FaultyUpstream } from '../../src/testing/faulty-upstream.js'

const closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close()
})

/** Rewrites every string of a JSON body that is not the prompt; wraps the prompt in parts. */
function rewrite(value: unknown): unknown {
  if (typeof value === 'string')
    return parseChaosMarker(value) === undefined ? value : [{ type: 'text', text: value }]
  if (Array.isArray(value)) return value.map(rewrite)
  if (typeof value === 'object' && value !== null) {
    const out: Record<string, unknown> = {}
    for (const [key, field] of Object.entries(value)) out[key] = rewrite(field)
    if ('model' in out) out.model = 'gateway-chosen-model'
    return out
  }
  return value
}

/**
 * A gateway that keeps nothing of the request but the prompt text: its own headers, model,
 * added fields, the prompt moved into content parts, a system message first. It buffers each
 * upstream answer and retries (up to 3 times) on a non-2xx status or an empty body.
 */
async function startRewritingGateway(upstreamUrl: string): Promise<ServedFetch> {
  const served = await serveFetch(async (request) => {
    const url = new URL(request.url)
    const incoming = (await request.json()) as Record<string, unknown>
    const body = {
      ...(rewrite(incoming) as Record<string, unknown>),
      metadata: { gateway: 'rewriter', tenant: 't-42' },
      temperature: 0.25,
      system: 'You are routed through a rewriting gateway.',
    }
    const path = url.pathname.replace(/models\/[^/:]+:/, 'models/gateway-chosen-model:')
    for (let attempt = 1; ; attempt++) {
      const answer = await fetch(`${upstreamUrl}${path}${url.search}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-gateway-attempt': String(attempt) },
        body: JSON.stringify(body),
      })
      const bytes = new Uint8Array(await answer.arrayBuffer())
      if ((answer.ok && bytes.length > 0) || attempt === 3) {
        const type = answer.headers.get('content-type') ?? 'text/plain'
        return new Response(bytes, { status: answer.status, headers: { 'content-type': type } })
      }
    }
  })
  closers.push(() => served.close())
  return served
}

async function setup(): Promise<{ upstream: FaultyUpstream; gateway: ServedFetch }> {
  const upstream = createFaultyUpstream({
    scenarios: Object.fromEntries(chaosScenarios.map((s) => [s.name, s.script])),
    text: chaosAnswer,
    reasoning: chaosReasoning,
  })
  closers.push(() => upstream.close())
  const gateway = await startRewritingGateway(await upstream.listen())
  return { upstream, gateway }
}

const targetFor = (protocol: ChaosProtocol, base: string) =>
  protocol.startsWith('openai') ? `${base}/v1` : base

describe('the chaos marker', () => {
  it('round-trips through chaosMarker and parseChaosMarker', () => {
    const marker = { scenario: 'empty', requestId: 'c1x-r.7_a' }
    expect(parseChaosMarker(`Say it. ${chaosMarker(marker)}`)).toEqual(marker)
    expect(parseChaosMarker(JSON.stringify({ text: chaosMarker(marker) }))).toEqual(marker)
  })

  it('the last marker in a body wins (the last user message comes last)', () => {
    const body = `${chaosMarker({ scenario: 'ok', requestId: 'old' })} … ${chaosMarker({ scenario: 'html-500', requestId: 'new' })}`
    expect(parseChaosMarker(body)).toEqual({ scenario: 'html-500', requestId: 'new' })
  })

  it('refuses a scenario or id that JSON would escape, naming what it got', () => {
    expect(() => chaosMarker({ scenario: 'a"b', requestId: 'r1' })).toThrow(
      /scenario and requestId must be 1 to 100 characters of \[A-Za-z0-9:._-\], got \{"scenario":"a\\"b"/,
    )
    expect(() => chaosMarker({ scenario: 'ok', requestId: '' })).toThrow(RangeError)
  })

  it('a body without a marker has none', () => {
    expect(parseChaosMarker('{"messages":[{"role":"user","content":"[[sb-chaos]]"}]}')).toBe(
      undefined,
    )
  })
})

describe.each(chaosProtocols)(
  'marker through a gateway that rewrites all but the prompt (%s)',
  (protocol) => {
    it('the upstream plays the marked scenario, counts attempts by request id, and tags the answer', async () => {
      const { upstream, gateway } = await setup()
      const adapter = protocolAdapters[protocol]
      const run = async (requestId: string) => {
        const request = buildClientRequest(protocol, targetFor(protocol, gateway.url), {
          scenario: 'empty',
          requestId,
        })
        const result = await runClient(request, {
          adapter,
          hangMs: 5000,
          action: 'read',
          pauseMs: 0,
        })
        return judgeObservation(result.observation, {
          adapter,
          answer: chaosAnswer,
          reasoning: chaosReasoning,
        })
      }
      const [first, second] = await Promise.all([run('req-a'), run('req-b')])
      // Each request met empty on its own first attempt: counts are per request id.
      expect(first).toMatchObject({ kind: 'full', attemptsSeen: [2] })
      expect(second).toMatchObject({ kind: 'full', attemptsSeen: [2] })
      const records = upstream.requests.map((r) => [r.requestId, r.attempt, r.fault, r.scenario])
      expect(records.sort()).toEqual([
        ['req-a', 1, 'empty', 'empty'],
        ['req-a', 2, 'ok', 'empty'],
        ['req-b', 1, 'empty', 'empty'],
        ['req-b', 2, 'ok', 'empty'],
      ])
      for (const record of upstream.requests) {
        // Nothing of the client's request reached the upstream but the prompt text.
        expect(record.headers['x-fault-scenario']).toBeUndefined()
        expect(record.headers['x-gateway-attempt']).toBe(String(record.attempt))
        // Gemini names the model in the path, the others in the body.
        expect(`${record.path} ${record.body}`).toContain('gateway-chosen-model')
        expect(`${record.path} ${record.body}`).not.toContain('chaos-model')
        expect(record.endedAt).toBeGreaterThanOrEqual(record.startedAt)
      }
    })
  },
)
