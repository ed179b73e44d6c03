import { afterEach, describe, expect, it, vi } from 'vitest'
import { anthropicMessages, createCommitGate, deliver, failBeforeContent, openaiChat } from '../../src/index.js'
import { pumpDefaults } from '../../src/advanced.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { type ScriptStep, scriptedBody } from '../../src/testing/scripted-body.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { text as decode } from '../support/sources.js'
import { useFakeClock } from '../support/timers.js'

const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
const text = (t: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}},"finish_reason":null}]}\n\n`
const reasoning = (t: string) =>
  `data: {"choices":[{"index":0,"delta":{"reasoning_content":${JSON.stringify(t)}},"finish_reason":null}]}\n\n`
const stop = 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
const done = 'data: [DONE]\n\n'

afterEach(() => {
  vi.useRealTimers()
})

function setup(
  steps: ScriptStep[],
  gateOptions: Parameters<typeof createCommitGate>[1] = {
    keepAliveIntervalMs: Number.POSITIVE_INFINITY,
  },
) {
  const body = scriptedBody(steps)
  const sink = createRecordingSink()
  const gate = createCommitGate(sink, gateOptions)
  return { body, sink, gate }
}

describe('deliver: peek, commit and pump', () => {
  it('relays a complete stream byte for byte and closes', async () => {
    const bytes = fixtureBytes('openai-chat/text.sse')
    const { body, sink, gate } = setup([{ bytes }])
    const outcome = await deliver({ gate, body: body.stream, adapter: openaiChat })
    expect(outcome.kind).toBe('committed')
    if (outcome.kind !== 'committed') return
    expect(outcome.pump.end).toEqual({ kind: 'completed' })
    expect(outcome.pump.eof?.kind).toBe('completed')
    expect(sink.bytes).toEqual(bytes)
    expect(sink.events.at(-1)?.type).toBe('close')
    expect(outcome.pump.bytes).toBe(bytes.length)
    expect(body.released).toBe(true)
  })

  it('writes nothing downstream when the peek fails, and releases the upstream', async () => {
    const { body, sink, gate } = setup([{ bytes: role }, { bytes: ': ping\n\n' }])
    const outcome = await deliver({ gate, body: body.stream, adapter: openaiChat })
    expect(outcome).toMatchObject({ kind: 'not-committed', peek: { kind: 'empty' } })
    expect(sink.events).toEqual([])
    expect(gate.canRetry).toBe(true)
    expect(body.released).toBe(true)
  })

  it('on partial EOF writes the honest error frame by default', async () => {
    const { sink, gate, body } = setup([{ bytes: role + text('Hel') + text('lo') }])
    const outcome = await deliver({ gate, body: body.stream, adapter: openaiChat })
    expect(outcome.kind === 'committed' && outcome.pump.end).toMatchObject({
      kind: 'error-written',
      cause: 'partial-eof',
    })
    expect(pumpDefaults.onPartialEof).toBe('error')
    const written = decode(sink.bytes)
    expect(written.startsWith(role + text('Hel') + text('lo'))).toBe(true)
    expect(written).toContain(
      '"error":{"message":"The upstream stream ended before its final event',
    )
    expect(written).not.toContain('[DONE]')
  })

  it("on partial EOF synthesizes a stop with onPartialEof: 'synthesize-stop'", async () => {
    const { sink, gate, body } = setup([{ bytes: role + text('Hi') }])
    const outcome = await deliver({
      gate,
      body: body.stream,
      adapter: openaiChat,
      onPartialEof: 'synthesize-stop',
    })
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({ kind: 'stop-synthesized' })
    expect(decode(sink.bytes)).toMatch(/"finish_reason":"stop".*\n\ndata: \[DONE\]\n\n$/s)
  })

  it('promotes reasoning to text on a thinking-only EOF when the policy asks, else writes an error', async () => {
    const thinking = setup([{ bytes: role + reasoning('Let me think. ') + reasoning('42.') }])
    const promoted = await deliver({
      gate: thinking.gate,
      body: thinking.body.stream,
      adapter: openaiChat,
      onThinkingOnly: 'promote-reasoning',
    })
    expect(promoted.kind === 'committed' && promoted.pump.end).toEqual({
      kind: 'reasoning-promoted',
    })
    expect(decode(thinking.sink.bytes)).toContain('"content":"Let me think. 42."')
    expect(decode(thinking.sink.bytes)).toMatch(/data: \[DONE\]\n\n$/)

    const honest = setup([{ bytes: reasoning('hmm') }])
    const errored = await deliver({
      gate: honest.gate,
      body: honest.body.stream,
      adapter: openaiChat,
    })
    expect(errored.kind === 'committed' && errored.pump.end).toMatchObject({
      cause: 'thinking-only',
    })
  })

  it('forwards an upstream error frame after output and adds nothing of its own', async () => {
    const bytes = fixtureBytes('anthropic-messages/error-after-text.sse')
    const { sink, gate, body } = setup([{ bytes }])
    const outcome = await deliver({ gate, body: body.stream, adapter: anthropicMessages })
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({ kind: 'upstream-error' })
    expect(sink.bytes).toEqual(bytes)
  })

  it('writes an error frame when the upstream connection breaks mid-stream', async () => {
    const { sink, gate, body } = setup([
      { bytes: role + text('a') },
      { error: new TypeError('terminated') },
    ])
    const outcome = await deliver({ gate, body: body.stream, adapter: openaiChat })
    expect(outcome.kind === 'committed' && outcome.pump.end).toMatchObject({
      kind: 'error-written',
      cause: 'read-error',
    })
    expect(decode(sink.bytes)).toContain('The connection to the upstream was lost mid-stream')
  })

  it('ends a stream that only sends keep-alives after commit with the idle watchdog, and cancels the upstream', async () => {
    useFakeClock()
    const steps: ScriptStep[] = [{ bytes: role + text('a') }]
    for (let i = 0; i < 100; i++) steps.push({ wait: 100 }, { bytes: ': keep-alive\n\n' })
    const { sink, gate, body } = setup(steps)
    const pending = deliver({ gate, body: body.stream, adapter: openaiChat, idleTimeoutMs: 1000 })
    await vi.advanceTimersByTimeAsync(1100)
    const outcome = await pending
    expect(outcome.kind === 'committed' && outcome.pump.end).toMatchObject({
      kind: 'error-written',
      cause: 'idle-timeout',
    })
    expect(decode(sink.bytes)).toContain('"type":"timeout"')
    expect(body.cancelled).toBe(true)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('ends cleanly when the upstream stalls after its terminal event, writing no error after [DONE]', async () => {
    useFakeClock()
    const { sink, gate, body } = setup([{ bytes: role + text('a') + stop + done }, { hang: true }])
    const pending = deliver({ gate, body: body.stream, adapter: openaiChat, idleTimeoutMs: 500 })
    await vi.advanceTimersByTimeAsync(600)
    const outcome = await pending
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({ kind: 'completed' })
    expect(decode(sink.bytes)).toBe(role + text('a') + stop + done)
    expect(body.cancelled).toBe(true)
  })

  it('counts gaps longer than the stall threshold', async () => {
    useFakeClock()
    const { gate, body } = setup([
      { bytes: role + text('a') },
      { wait: 3000 },
      { bytes: text('b') },
      { wait: 100 },
      { bytes: text('c') },
      { wait: 2500 },
      { bytes: stop + done },
    ])
    const pending = deliver({ gate, body: body.stream, adapter: openaiChat })
    await vi.advanceTimersByTimeAsync(6000)
    const outcome = await pending
    expect(outcome.kind === 'committed' && outcome.pump.stalls).toMatchObject({
      count: 2,
      longestMs: 3000,
      thresholdMs: 2000,
    })
  })

  it('stops reading and cancels the upstream when a downstream write fails; the failure is downstream', async () => {
    const { sink, gate, body } = setup([
      { bytes: role + text('a') },
      { bytes: text('b') },
      { bytes: text('c') },
      { hang: true },
    ])
    sink.failWritesAfter(2)
    const outcome = await deliver({ gate, body: body.stream, adapter: openaiChat })
    expect(outcome.kind === 'committed' && outcome.pump.end).toMatchObject({
      kind: 'client-gone',
      error: { code: 'DOWNSTREAM_CLOSED', reason: 'write-failed' },
    })
    expect(body.cancelled).toBe(true)
    // Writes 1-2 are the first chunk's two frames; the third ('b', chunk 2) fails: chunk 3 is never read.
    expect(body.chunksSent).toBe(2)
  })

  it('cancels the upstream promptly when the client disconnects during the pump', async () => {
    const { sink, gate, body } = setup([{ bytes: role + text('a') }, { hang: true }])
    const pending = deliver({ gate, body: body.stream, adapter: openaiChat })
    await vi.waitFor(() => expect(sink.events.some((e) => e.type === 'write')).toBe(true))
    sink.disconnect()
    const outcome = await pending
    expect(outcome.kind === 'committed' && outcome.pump.end).toMatchObject({
      kind: 'client-gone',
    })
    expect(body.cancelled).toBe(true)
  })

  it('cancels the upstream when the client disconnects during the peek, committing nothing', async () => {
    const { sink, gate, body } = setup([{ bytes: role }, { hang: true }])
    const pending = deliver({ gate, body: body.stream, adapter: openaiChat })
    await vi.waitFor(() => expect(body.chunksSent).toBe(1))
    sink.disconnect()
    const outcome = await pending
    expect(outcome).toMatchObject({ kind: 'not-committed', peek: { kind: 'aborted' } })
    expect(body.cancelled).toBe(true)
    expect(sink.events.filter((e) => e.type !== 'abort')).toEqual([])
  })
})

describe('earlyHeaders', () => {
  it('sends the head before the first upstream frame is read, and a later stall becomes an in-band error', async () => {
    useFakeClock()
    const { sink, gate, body } = setup([{ wait: 50 }, { bytes: role }, { hang: true }], {
      earlyHeaders: true,
      keepAliveIntervalMs: Number.POSITIVE_INFINITY,
    })
    const pending = deliver({
      gate,
      body: body.stream,
      adapter: openaiChat,
      peek: { firstOutputTimeoutMs: 1000 },
    })
    await vi.advanceTimersByTimeAsync(1)
    expect(sink.events.map((e) => e.type)).toEqual(['head'])
    expect(body.chunksSent).toBe(0)
    await vi.advanceTimersByTimeAsync(1000)
    const outcome = await pending
    expect(outcome).toMatchObject({ kind: 'not-committed', peek: { kind: 'first-output-timeout' } })
    expect(gate.state).toBe('headers-committed')
    expect(gate.canRetry).toBe(true)
    await failBeforeContent(gate, openaiChat, 504, {
      type: 'timeout',
      message: 'no output within 1000 ms',
    })
    expect(sink.status).toBe(200)
    expect(decode(sink.bytes)).toBe(
      decode(openaiChat.renderError({ type: 'timeout', message: 'no output within 1000 ms' })),
    )
  })

  it('without early headers a failure before content is a real status with the protocol JSON body', async () => {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink)
    await failBeforeContent(gate, anthropicMessages, 529, {
      type: 'overloaded_error',
      message: 'Overloaded',
    })
    expect(sink.status).toBe(529)
    expect(JSON.parse(decode(sink.bytes))).toEqual({
      type: 'error',
      error: { type: 'overloaded_error', message: 'Overloaded' },
    })
  })
})
