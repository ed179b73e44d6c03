/**
 * Every request-scoped timeout: its documented default, one rule for its values (`0`,
 * negatives and `NaN` are a RangeError naming it; `Infinity` is "off" and arms no timer),
 * the two separate clocks of the pump (invariant 14), and timers cleared on settle (12).
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { commitGateDefaults, peekDefaults, pumpDefaults } from '../../src/advanced.js'
import {
  createCommitGate,
  createFrameReader,
  deliver,
  isDownstreamClosedError,
  openaiChat,
  peekFirstOutput,
  StreamTimeoutError,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { type ScriptStep, scriptedBody } from '../../src/testing/scripted-body.js'
import { useFakeClock } from '../support/timers.js'

const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
const text = (t: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}},"finish_reason":null}]}\n\n`
const stop = 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
const done = 'data: [DONE]\n\n'

afterEach(() => {
  vi.useRealTimers()
})

const message = (name: string, value: number) =>
  `${name} must be a positive number of milliseconds up to 2147483647, or Infinity to turn it off; got ${String(value)}`

describe('timeout defaults', () => {
  it('are finite and documented in the defaults objects', () => {
    expect(peekDefaults.firstByteTimeoutMs).toBe(30_000)
    expect(peekDefaults.firstOutputTimeoutMs).toBe(600_000)
    expect(pumpDefaults.idleTimeoutMs).toBe(300_000)
    expect(pumpDefaults.writeStallTimeoutMs).toBe(60_000)
    expect(commitGateDefaults.writeStallTimeoutMs).toBe(60_000)
  })

  it('a keep-alive-only upstream under default peek options ends at the first-output default', async () => {
    useFakeClock()
    const steps: ScriptStep[] = []
    for (let i = 0; i < 100; i++) steps.push({ bytes: ': keep-alive\n\n' }, { wait: 15_000 })
    const body = scriptedBody(steps)
    let settled = false
    const pending = peekFirstOutput(createFrameReader(body.stream), openaiChat).finally(() => {
      settled = true
    })
    await vi.advanceTimersByTimeAsync(peekDefaults.firstOutputTimeoutMs - 1)
    expect(settled).toBe(false)
    await vi.advanceTimersByTimeAsync(1)
    const outcome = await pending
    expect(outcome).toMatchObject({
      kind: 'first-output-timeout',
      error: { code: 'FIRST_OUTPUT_TIMEOUT', timeoutMs: 600_000 },
    })
    expect(outcome.elapsedMs).toBe(600_000)
    await outcome.reader.cancel()
    expect(body.cancelled).toBe(true)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('a body that never sends a byte under default peek options ends at the first-byte default', async () => {
    useFakeClock()
    const body = scriptedBody([{ hang: true }])
    const pending = peekFirstOutput(createFrameReader(body.stream), openaiChat)
    await vi.advanceTimersByTimeAsync(peekDefaults.firstByteTimeoutMs)
    const outcome = await pending
    expect(outcome).toMatchObject({ kind: 'first-byte-timeout', error: { timeoutMs: 30_000 } })
    await outcome.reader.cancel()
    expect(vi.getTimerCount()).toBe(0)
  })
})

describe('the peek clocks can start before the peek', () => {
  it('clockStartedAt: time already spent connecting counts against the first-byte bound', async () => {
    useFakeClock()
    const sentAt = performance.now()
    await vi.advanceTimersByTimeAsync(20_000) // connect and headers took 20 s
    const body = scriptedBody([{ hang: true }])
    let settled = false
    const pending = peekFirstOutput(createFrameReader(body.stream), openaiChat, {
      clockStartedAt: sentAt,
    }).finally(() => {
      settled = true
    })
    await vi.advanceTimersByTimeAsync(9_999)
    expect(settled).toBe(false)
    await vi.advanceTimersByTimeAsync(1)
    const outcome = await pending
    expect(outcome).toMatchObject({ kind: 'first-byte-timeout', error: { timeoutMs: 30_000 } })
    await outcome.reader.cancel()
    expect(vi.getTimerCount()).toBe(0)
  })

  it('clockStartedAt must be a finite time', async () => {
    const reader = createFrameReader(new Response('').body as ReadableStream<Uint8Array>)
    await expect(
      peekFirstOutput(reader, openaiChat, { clockStartedAt: Number.NaN }),
    ).rejects.toThrow('clockStartedAt must be a performance.now() time, got NaN')
  })
})

describe('timeout values: one rule for every option', () => {
  const invalid = [0, -1, Number.NaN]

  it.each(['firstByteTimeoutMs', 'firstOutputTimeoutMs'] as const)(
    'peek %s: 0, -1 and NaN are a RangeError naming it',
    async (name) => {
      for (const value of invalid) {
        const reader = createFrameReader(new Response('').body as ReadableStream<Uint8Array>)
        const peeked = peekFirstOutput(reader, openaiChat, { [name]: value })
        await expect(peeked).rejects.toThrow(RangeError)
        await expect(peeked).rejects.toThrow(message(name, value))
      }
    },
  )

  it.each(['idleTimeoutMs', 'writeStallTimeoutMs'] as const)(
    'pump %s: 0, -1 and NaN are a RangeError naming it, before anything is read or written',
    async (name) => {
      for (const value of invalid) {
        const sink = createRecordingSink()
        const body = scriptedBody([{ bytes: role + text('a') + stop + done }])
        const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
        const delivered = deliver({ gate, body: body.stream, adapter: openaiChat, [name]: value })
        await expect(delivered).rejects.toThrow(RangeError)
        await expect(delivered).rejects.toThrow(message(name, value))
        expect(sink.events).toEqual([])
        expect(body.chunksSent).toBe(0)
      }
    },
  )

  it('gate writeStallTimeoutMs: 0, -1 and NaN are a RangeError naming it', () => {
    for (const value of invalid) {
      expect(() => createCommitGate(createRecordingSink(), { writeStallTimeoutMs: value })).toThrow(
        message('writeStallTimeoutMs', value),
      )
    }
  })

  it('a timeout past the longest timer delay is refused: setTimeout would fire it at once', () => {
    expect(() => createCommitGate(createRecordingSink(), { writeStallTimeoutMs: 2 ** 31 })).toThrow(
      message('writeStallTimeoutMs', 2 ** 31),
    )
  })

  it('Infinity arms no timer in peek; the defaults arm two', async () => {
    useFakeClock()
    const off = scriptedBody([{ hang: true }])
    const offController = new AbortController()
    const offPeek = peekFirstOutput(createFrameReader(off.stream), openaiChat, {
      signal: offController.signal,
      firstByteTimeoutMs: Number.POSITIVE_INFINITY,
      firstOutputTimeoutMs: Number.POSITIVE_INFINITY,
    })
    await vi.advanceTimersByTimeAsync(0)
    expect(vi.getTimerCount()).toBe(0)
    // setTimeout(fn, Infinity) would have fired at once; a year later it still waits.
    await vi.advanceTimersByTimeAsync(365 * 24 * 3_600_000)
    const controller = new AbortController()
    const on = scriptedBody([{ hang: true }])
    const onPeek = peekFirstOutput(createFrameReader(on.stream), openaiChat, {
      signal: controller.signal,
    })
    await vi.advanceTimersByTimeAsync(0)
    expect(vi.getTimerCount()).toBe(2)
    controller.abort('done')
    expect(await onPeek).toMatchObject({ kind: 'aborted' })
    expect(vi.getTimerCount()).toBe(0)
    offController.abort('done')
    expect(await offPeek).toMatchObject({ kind: 'aborted' })
  })

  it('Infinity arms no timer in the pump or the gate', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const body = scriptedBody([{ bytes: role + text('a') }, { hang: true }])
    const gate = createCommitGate(sink, {
      keepAliveIntervalMs: Number.POSITIVE_INFINITY,
      writeStallTimeoutMs: Number.POSITIVE_INFINITY,
    })
    const controller = new AbortController()
    const delivered = deliver({
      gate,
      body: body.stream,
      adapter: openaiChat,
      signal: controller.signal,
      peek: { firstByteTimeoutMs: Number.POSITIVE_INFINITY },
      idleTimeoutMs: Number.POSITIVE_INFINITY,
      writeStallTimeoutMs: Number.POSITIVE_INFINITY,
    })
    await vi.advanceTimersByTimeAsync(1_000)
    expect(gate.state).toBe('content-committed')
    expect(vi.getTimerCount()).toBe(0)
    controller.abort('host gave up')
    expect(await delivered).toMatchObject({ kind: 'committed', pump: { end: { kind: 'aborted' } } })
    expect(body.cancelled).toBe(true)
  })
})

describe('the pump: upstream silence and downstream backpressure are separate clocks', () => {
  it('time blocked on the client never counts as upstream idleness; the clock goes on when the write completes', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const body = scriptedBody([{ bytes: role + text('a') }, { hang: true }])
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    const release = sink.holdWrites()
    let settled = false
    const delivered = deliver({
      gate,
      body: body.stream,
      adapter: openaiChat,
      idleTimeoutMs: 1_000,
      writeStallTimeoutMs: 10_000,
    }).finally(() => {
      settled = true
    })
    // The client takes nothing for 5 s: five idle bounds, none of it the upstream's silence.
    await vi.advanceTimersByTimeAsync(5_000)
    expect(settled).toBe(false)
    release()
    await vi.advanceTimersByTimeAsync(999)
    expect(settled).toBe(false)
    await vi.advanceTimersByTimeAsync(1)
    const outcome = await delivered
    expect(outcome.kind === 'committed' && outcome.pump.end).toMatchObject({
      kind: 'error-written',
      cause: 'idle-timeout',
    })
    expect(body.cancelled).toBe(true)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('keep-alives never restart the idle clock, even when their writes block', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const steps: ScriptStep[] = [{ bytes: role + text('a') }]
    for (let i = 0; i < 20; i++) steps.push({ wait: 200 }, { bytes: ': keep-alive\n\n' })
    const body = scriptedBody(steps)
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    const delivered = deliver({
      gate,
      body: body.stream,
      adapter: openaiChat,
      idleTimeoutMs: 1_000,
    })
    await vi.advanceTimersByTimeAsync(1_000)
    const outcome = await delivered
    expect(outcome.kind === 'committed' && outcome.pump.end).toMatchObject({
      kind: 'error-written',
      cause: 'idle-timeout',
    })
    expect(outcome.kind === 'committed' && outcome.pump.durationMs).toBe(1_000)
  })

  it('a write the client has not taken for writeStallTimeoutMs ends downstream-stalled: cut, upstream cancelled', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const body = scriptedBody([{ bytes: role + text('a') }, { wait: 10 }, { bytes: text('b') }])
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    sink.holdWrites()
    let settled = false
    const delivered = deliver({
      gate,
      body: body.stream,
      adapter: openaiChat,
      idleTimeoutMs: 500,
      writeStallTimeoutMs: 2_000,
    }).finally(() => {
      settled = true
    })
    await vi.advanceTimersByTimeAsync(1_999)
    expect(settled).toBe(false)
    await vi.advanceTimersByTimeAsync(1)
    const outcome = await delivered
    expect(outcome.kind).toBe('committed')
    if (outcome.kind !== 'committed') return
    expect(outcome.pump.end).toEqual({
      kind: 'downstream-stalled',
      error: new StreamTimeoutError('write-stall', 2_000),
    })
    expect(sink.events.at(-1)).toMatchObject({ type: 'abort', reason: { timeout: 'write-stall' } })
    expect(body.cancelled).toBe(true)
    expect(body.cancelReason).toMatchObject({ code: 'WRITE_STALL_TIMEOUT' })
    expect(vi.getTimerCount()).toBe(0)
  })

  /** A sink whose writes wait on `release`, and whose client takes a byte every `everyMs` until `stopAt`. */
  function slowReader(everyMs: number, stopAt: number) {
    const sink = createRecordingSink()
    const release = sink.holdWrites()
    let taken = 0
    const started = Date.now()
    const reading = setInterval(() => {
      if (Date.now() - started >= stopAt) return clearInterval(reading)
      taken++
    }, everyMs)
    return {
      sink: { ...sink, bytesTaken: () => taken },
      release,
      stopReading: () => clearInterval(reading),
    }
  }

  it('a client still taking bytes is not cut, however long one write waits on it (bytesTaken)', async () => {
    useFakeClock()
    const { sink, release, stopReading } = slowReader(100, Number.POSITIVE_INFINITY)
    const body = scriptedBody([
      { bytes: role + text('a') },
      { wait: 10 },
      { bytes: text('b') + stop + done },
    ])
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    const delivered = deliver({
      gate,
      body: body.stream,
      adapter: openaiChat,
      idleTimeoutMs: 500,
      writeStallTimeoutMs: 2_000,
    })
    // Ten times the bound blocked on writes, the client taking a byte every 100 ms.
    await vi.advanceTimersByTimeAsync(20_000)
    release()
    stopReading()
    await vi.advanceTimersByTimeAsync(100)
    const outcome = await delivered
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({ kind: 'completed' })
    expect(body.cancelled).toBe(false)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('a client that stops taking bytes is cut writeStallTimeoutMs after its last byte (within a quarter of it)', async () => {
    useFakeClock()
    const { sink, stopReading } = slowReader(100, 5_000)
    const body = scriptedBody([{ bytes: role + text('a') }, { wait: 10 }, { bytes: text('b') }])
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    let settled = false
    const delivered = deliver({
      gate,
      body: body.stream,
      adapter: openaiChat,
      idleTimeoutMs: 500,
      writeStallTimeoutMs: 2_000,
    }).finally(() => {
      settled = true
    })
    await vi.advanceTimersByTimeAsync(5_000 + 2_000 - 1)
    expect(settled).toBe(false)
    await vi.advanceTimersByTimeAsync(500)
    expect(settled).toBe(true)
    stopReading()
    const outcome = await delivered
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({
      kind: 'downstream-stalled',
      error: new StreamTimeoutError('write-stall', 2_000),
    })
    expect(body.cancelled).toBe(true)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('the host aborting while a write waits on a slow client ends the pump at once', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const body = scriptedBody([{ bytes: role + text('a') }, { hang: true }])
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    sink.holdWrites()
    const host = new AbortController()
    const delivered = deliver({ gate, body: body.stream, adapter: openaiChat, signal: host.signal })
    await vi.advanceTimersByTimeAsync(100)
    host.abort('host gave up')
    const outcome = await delivered
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({
      kind: 'aborted',
      reason: 'host gave up',
    })
    expect(outcome.kind === 'committed' && outcome.pump.durationMs).toBe(100)
    expect(sink.events.at(-1)).toEqual({ type: 'abort', reason: 'host gave up' })
    expect(body.cancelled).toBe(true)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('a close the client never lets finish is bounded the same way', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const closing = new Promise<void>(() => {})
    const stuck = { ...sink, close: () => closing }
    const body = scriptedBody([{ bytes: role + text('a') + stop + done }])
    const gate = createCommitGate(stuck, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    const delivered = deliver({ gate, body: body.stream, adapter: openaiChat })
    await vi.advanceTimersByTimeAsync(pumpDefaults.writeStallTimeoutMs)
    const outcome = await delivered
    expect(outcome.kind === 'committed' && outcome.pump.end).toMatchObject({
      kind: 'downstream-stalled',
    })
    expect(sink.events.at(-1)).toMatchObject({ type: 'abort' })
    expect(vi.getTimerCount()).toBe(0)
  })
})

describe('the gate bounds its own keep-alive writes', () => {
  it('a keep-alive the client has not taken for writeStallTimeoutMs fails the gate as a write stall', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, { keepAliveIntervalMs: 1_000, writeStallTimeoutMs: 3_000 })
    await gate.commitHeaders()
    sink.holdWrites()
    await vi.advanceTimersByTimeAsync(1_000)
    expect(gate.writePending).toBe(true)
    await vi.advanceTimersByTimeAsync(2_999)
    expect(gate.failure).toBeUndefined()
    await vi.advanceTimersByTimeAsync(1)
    expect(isDownstreamClosedError(gate.failure)).toBe(true)
    expect(gate.failure?.cause).toEqual(new StreamTimeoutError('write-stall', 3_000))
    expect(gate.signal.aborted).toBe(true)
    expect(sink.events.at(-1)).toMatchObject({ type: 'abort' })
    expect(vi.getTimerCount()).toBe(0)
  })

  it('a pump waiting on the upstream ends downstream-stalled when the gate keep-alive stalls', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const body = scriptedBody([{ bytes: role + text('a') }, { hang: true }])
    const gate = createCommitGate(sink, { keepAliveIntervalMs: 1_000, writeStallTimeoutMs: 3_000 })
    const delivered = deliver({ gate, body: body.stream, adapter: openaiChat })
    await vi.advanceTimersByTimeAsync(0)
    sink.holdWrites()
    await vi.advanceTimersByTimeAsync(5_000)
    const outcome = await delivered
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({
      kind: 'downstream-stalled',
      error: new StreamTimeoutError('write-stall', 3_000),
    })
    expect(body.cancelled).toBe(true)
    expect(vi.getTimerCount()).toBe(0)
  })
})
