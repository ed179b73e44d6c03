/**
 * What a relayed request makes of the runtime's abort machinery. On Node 20 an
 * `AbortController` costs about 4 µs and a listener on its signal about 1 µs to add and
 * remove; a relay used to make five and attach seven per request. Inside the library a
 * request is now stopped by library-made stops; the only `AbortController` a plain relay
 * makes is the attempt function's own `signal`. Counted, not timed. The host still gets real
 * signals whenever it asks (`sink.signal`, `gate.signal`), and they abort as before.
 */
import { createServer, request } from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { createCommitGate, createMemoryKeyPool, openaiChat, type RelayOutcome, relay, webSink } from '../../src/index.js'
import { iterableResponse } from '../../src/node.js'
import { nodeSink } from '../../src/node.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { useLoopback } from '../support/loopback.js'

const loopback = useLoopback()

const Original = globalThis.AbortController
let made = 0
let listened = 0
const originalAdd = EventTarget.prototype.addEventListener

function countSignals(): void {
  made = 0
  listened = 0
  globalThis.AbortController = class extends Original {
    constructor() {
      super()
      made++
    }
  }
  EventTarget.prototype.addEventListener = function (this: EventTarget, ...args) {
    if (this instanceof AbortSignal) listened++
    return originalAdd.apply(this, args as Parameters<typeof originalAdd>)
  }
}

afterEach(() => {
  globalThis.AbortController = Original
  EventTarget.prototype.addEventListener = originalAdd
})

const pool = createMemoryKeyPool([{ id: 'a', secret: 'sk-test-signals-0123456789' }])
const frames = fixtureBytes('openai-chat/text.sse')

async function* chunks(): AsyncGenerator<Uint8Array> {
  yield frames
}

async function relayOnce(policy: { deadlineMs?: number } = {}): Promise<RelayOutcome> {
  const { sink, response } = webSink()
  const outcome = relay({
    sink,
    pool,
    adapter: openaiChat,
    policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY, ...policy },
    attempt: async ({ signal }) => {
      expect(signal).toBeInstanceOf(AbortSignal)
      return iterableResponse(chunks(), { headers: { 'content-type': 'text/event-stream' } })
    },
  })
  await (await response).text()
  return outcome
}

describe('abort signals per relayed request', () => {
  it('a relay makes one AbortController (the attempt function’s signal) and listens to no AbortSignal', async () => {
    await relayOnce() // warm: module-level signals are made once
    countSignals()
    const outcome = await relayOnce()
    expect(outcome.kind).toBe('committed')
    expect(made).toBe(1)
    expect(listened).toBe(0)
  })

  it('with a deadline: one more controller (the deadline) and one listener on it (the attempt’s); a key wait’s follower only when a request waits', async () => {
    countSignals()
    const outcome = await relayOnce({ deadlineMs: 60_000 })
    expect(outcome.kind).toBe('committed')
    expect(made).toBe(2)
    expect(listened).toBe(1)
  })

  it('sink.signal and gate.signal are real AbortSignals that abort when the client leaves, whether asked for before or after', async () => {
    for (const askBefore of [true, false]) {
      const { sink, response } = webSink()
      const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
      const before = askBefore ? [sink.signal, gate.signal] : []
      await gate.write(new TextEncoder().encode('data: {}\n\n'))
      await (await response).body?.cancel(new Error('gone'))
      const after = [sink.signal, gate.signal]
      for (const signal of [...before, ...after]) {
        expect(signal).toBeInstanceOf(AbortSignal)
        expect(signal.aborted).toBe(true)
      }
      expect(sink.signal.reason).toEqual(new Error('gone'))
      expect(gate.signal.reason).toMatchObject({ code: 'DOWNSTREAM_CLOSED', reason: 'client-gone' })
      expect(gate.failure).toBeDefined()
    }
  })

  it('nodeSink over a real connection: a client that leaves aborts sink.signal and gate.signal, whether they are read before or after', async () => {
    for (const askBefore of [true, false]) {
      type Served = {
        sink: ReturnType<typeof nodeSink>
        gate: ReturnType<typeof createCommitGate>
        before: AbortSignal[]
      }
      let resolveServed!: (served: Served) => void
      const served = new Promise<Served>((resolve) => {
        resolveServed = resolve
      })
      const url = await loopback.listen(
        createServer((_req, res) => {
          const sink = nodeSink(res)
          const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
          const before = askBefore ? [sink.signal, gate.signal] : []
          void gate.write(new TextEncoder().encode('data: {}\n\n'))
          resolveServed({ sink, gate, before })
        }),
      )
      const client = request(url, { method: 'POST' })
      client.on('error', () => {})
      client.on('response', (res) => res.once('data', () => client.destroy()))
      client.end()
      const { sink, gate, before } = await served
      await new Promise<void>((resolve) => {
        const check = () => (gate.failure === undefined ? setTimeout(check, 5) : resolve())
        check()
      })
      for (const signal of [...before, sink.signal, gate.signal]) {
        expect(signal).toBeInstanceOf(AbortSignal)
        expect(signal.aborted).toBe(true)
      }
      expect(gate.signal.reason).toMatchObject({ code: 'DOWNSTREAM_CLOSED', reason: 'client-gone' })
    }
  })
})
