/**
 * Silence before output: where the protocol sends events while a model thinks (Anthropic's
 * `ping`, Responses' keep-alive events), an attempt that sent a preamble and then not one
 * byte for `silenceTimeoutMs` (90 s by default) is dead: retried on the next key at once,
 * which is not cooled (a protocol fault). Keep-alives and pings count as bytes. Chat
 * Completions and Gemini keep the first-output bound only.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { peekDefaults } from '../../src/advanced.js'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  geminiGenerateContent,
  type KeyPool,
  openaiChat,
  openaiResponses,
  type RelayOutcome,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { type ScriptStep, scriptedBody } from '../../src/testing/scripted-body.js'
import { wireFor } from '../../src/testing/wire.js'
import { useFakeClock } from '../support/timers.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

afterEach(() => {
  vi.useRealTimers()
})

const keys = [
  { id: 'a', secret: 'sk-silence-a-0123456789' },
  { id: 'b', secret: 'sk-silence-b-0123456789' },
]

/** The preamble and a keep-alive (bytes, no output), then `then`. */
function preambleThen(adapter: StreamAdapter, then: ScriptStep[]): Behaviour {
  const w = wireFor(adapter)
  return { steps: [{ bytes: w.start().join('') + w.keepalive() }, ...then] }
}

function answer(adapter: StreamAdapter): Behaviour {
  const w = wireFor(adapter)
  return { steps: [{ bytes: [...w.start(), ...w.text('Hello'), ...w.finish('stop')].join('') }] }
}

async function viaRelay(adapter: StreamAdapter, script: Behaviour[], pool: KeyPool) {
  const upstream = scriptedUpstream(script)
  const outcome = await relay({
    sink: createRecordingSink(),
    pool,
    adapter,
    attempt: upstream.attempt,
  })
  return { outcome, calls: upstream.calls }
}

async function viaFetch(adapter: StreamAdapter, script: Behaviour[], pool: KeyPool) {
  let outcome: RelayOutcome | undefined
  let call = 0
  const fetch = createResilientFetch({
    pool,
    onOutcome: (o) => {
      outcome = o
    },
    fetch: async () => {
      const { steps = [] } = script[Math.min(call++, script.length - 1)] as Behaviour
      return new Response(scriptedBody(steps).stream, {
        headers: { 'content-type': 'text/event-stream' },
      })
    },
  })
  const url =
    adapter === anthropicMessages
      ? 'http://upstream.test/v1/messages'
      : 'http://upstream.test/v1/responses'
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream: true, input: 'hi', messages: [] }),
  })
  await response.text()
  await vi.waitFor(() => expect(outcome).toBeDefined())
  return { outcome, calls: Array.from({ length: call }) }
}

describe.each([
  ['relay()', viaRelay],
  ['createResilientFetch', viaFetch],
] as const)('silence before output through %s', (_, run) => {
  it.each([anthropicMessages, openaiResponses].map((a) => [a.name, a] as const))(
    '%s: a preamble then no byte for 90 s is retried on the next key at once, neither key cooled',
    async (_, adapter) => {
      useFakeClock()
      const pool = createMemoryKeyPool(keys)
      const pending = run(adapter, [preambleThen(adapter, [{ hang: true }]), answer(adapter)], pool)
      await vi.advanceTimersByTimeAsync(peekDefaults.silenceTimeoutMs + 10)
      const { outcome } = await pending
      expect(outcome?.kind).toBe('committed')
      expect(outcome?.attempts.map((a) => a.result)).toEqual(['silence-timeout', 'committed'])
      expect(outcome?.attempts.map((a) => a.keyId)).toEqual(['a', 'b'])
      for (const key of pool.toJSON().keys) expect(key.cooldownUntil).toBe(0)
      expect((await pool.stats()).find((s) => s.id === 'a')?.outcomes['protocol-fault']).toBe(1)
    },
  )

  it.each([anthropicMessages, openaiResponses].map((a) => [a.name, a] as const))(
    '%s: keep-alives every 30 s for 5 minutes count as bytes: the thinking answer is not cut',
    async (_, adapter) => {
      useFakeClock()
      const w = wireFor(adapter)
      const beats: ScriptStep[] = []
      for (let i = 0; i < 10; i++) beats.push({ wait: 30_000 }, { bytes: w.keepalive() })
      const thinking = preambleThen(adapter, [
        ...beats,
        { bytes: [...w.text('Hello'), ...w.finish('stop')].join('') },
      ])
      const pending = run(adapter, [thinking], createMemoryKeyPool(keys))
      await vi.advanceTimersByTimeAsync(10 * 30_000 + 10)
      const { outcome } = await pending
      expect(outcome?.kind).toBe('committed')
      expect(outcome?.attempts.map((a) => a.result)).toEqual(['committed'])
    },
  )
})

describe('protocols that may say nothing while a model thinks keep the first-output bound', () => {
  it.each([openaiChat, geminiGenerateContent].map((a) => [a.name, a] as const))(
    '%s: a preamble then 5 minutes of silence, then the answer: not cut',
    async (_, adapter) => {
      useFakeClock()
      const w = wireFor(adapter)
      const slow = preambleThen(adapter, [
        { wait: 300_000 },
        { bytes: [...w.text('Hello'), ...w.finish('stop')].join('') },
      ])
      const pending = viaRelay(adapter, [slow], createMemoryKeyPool(keys))
      await vi.advanceTimersByTimeAsync(300_010)
      const { outcome } = await pending
      expect(outcome.attempts.map((a) => a.result)).toEqual(['committed'])
    },
  )
})

describe('silenceTimeoutMs as an option', () => {
  it('is validated with the other peek timeouts', async () => {
    await expect(
      relay({
        sink: createRecordingSink(),
        adapter: openaiChat,
        attempt: async () => new Response(''),
        policy: { peek: { silenceTimeoutMs: 0 } },
      }),
    ).rejects.toThrow(/silenceTimeoutMs/)
  })

  it('applies to any protocol when set: Chat with silenceTimeoutMs 20 s', async () => {
    useFakeClock()
    const upstream = scriptedUpstream([
      preambleThen(openaiChat, [{ hang: true }]),
      answer(openaiChat),
    ])
    const pending = relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool(keys),
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { peek: { silenceTimeoutMs: 20_000 } },
    })
    await vi.advanceTimersByTimeAsync(20_010)
    const outcome = await pending
    expect(outcome.attempts.map((a) => a.result)).toEqual(['silence-timeout', 'committed'])
  })
})
