import { afterEach, describe, expect, it, vi } from 'vitest'
import { commitGateDefaults } from '../../src/advanced.js'
import {
  createCommitGate,
  DownstreamClosedError,
  isHeadersSentError,
  isRetryAfterCommitError,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { utf8 } from '../support/sources.js'
import { useFakeClock } from '../support/timers.js'

afterEach(() => {
  vi.useRealTimers()
})

describe('createCommitGate', () => {
  it('moves open → headers-committed → content-committed → closed, and retry is refused after content', async () => {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, {
      keepAliveIntervalMs: Number.POSITIVE_INFINITY,
      headers: { 'x-request-id': 'r1' },
    })
    expect([gate.state, gate.canRetry]).toEqual(['open', true])
    gate.assertCanRetry()
    await gate.commitHeaders()
    expect([gate.state, gate.canRetry]).toEqual(['headers-committed', true])
    gate.assertCanRetry()
    await gate.write(utf8('data: x\n\n'))
    expect([gate.state, gate.canRetry]).toEqual(['content-committed', false])
    let refused: unknown
    try {
      gate.assertCanRetry()
    } catch (error) {
      refused = error
    }
    expect(isRetryAfterCommitError(refused)).toBe(true)
    await gate.close()
    expect(gate.state).toBe('closed')
    const head = sink.events[0]
    expect(head?.type === 'head' && Object.fromEntries(head.headers)).toEqual({
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
      'x-request-id': 'r1',
    })
    expect(sink.events.map((e) => e.type)).toEqual(['head', 'write', 'close'])
  })

  it('commits headers and content together on the first write by default', async () => {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink)
    expect(sink.events).toEqual([])
    await gate.write(utf8('data: x\n\n'))
    expect(sink.events.map((e) => e.type)).toEqual(['head', 'write'])
    await gate.close()
  })

  it('keeps the order of unawaited writes and a close issued right after them', async () => {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    const pending = [
      gate.write(utf8('1')),
      gate.write(utf8('2')),
      gate.write(utf8('3')),
      gate.close(),
    ]
    await Promise.all(pending)
    expect(
      sink.events.map((e) => (e.type === 'write' ? new TextDecoder().decode(e.bytes) : e.type)),
    ).toEqual(['head', '1', '2', '3', 'close'])
    expect(gate.state).toBe('closed')
  })

  it('answers with a real status before anything was sent, and refuses to once headers went out', async () => {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink)
    await gate.respond(502, '{"error":{"message":"bad gateway"}}', { 'retry-after': '3' })
    expect(sink.status).toBe(502)
    const head = sink.events[0]
    expect(head?.type === 'head' && head.headers.get('content-type')).toBe('application/json')
    expect(head?.type === 'head' && head.headers.get('retry-after')).toBe('3')
    expect(sink.text).toBe('{"error":{"message":"bad gateway"}}')

    const late = createCommitGate(createRecordingSink(), {
      keepAliveIntervalMs: Number.POSITIVE_INFINITY,
    })
    await late.commitHeaders()
    expect(isHeadersSentError(await late.respond(502, '').catch((e: unknown) => e))).toBe(true)
    await late.close()
  })

  it('writes keep-alive comments only after headers, never counting them as content', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, { keepAliveIntervalMs: 1000 })
    await vi.advanceTimersByTimeAsync(5000)
    expect(sink.events).toEqual([])
    await gate.commitHeaders()
    await vi.advanceTimersByTimeAsync(3500)
    const comments = sink.events.filter((e) => e.type === 'write')
    expect(comments.length).toBeGreaterThanOrEqual(2)
    expect(sink.text).toMatch(/^(: keep-alive\n\n)+$/)
    expect(gate.state).toBe('headers-committed')
    expect(gate.canRetry).toBe(true)
    expect(gate.bytesWritten).toBe(0)
    await gate.close()
    expect(vi.getTimerCount()).toBe(0)
  })

  it('never puts a keep-alive inside a frame: writes are whole and in order even under backpressure', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, { keepAliveIntervalMs: 100 })
    await gate.commitHeaders()
    const release = sink.holdWrites()
    const frame = utf8('data: {"choices":[{"delta":{"content":"a long frame"}}]}\n\n')
    const writing = gate.write(frame)
    await vi.advanceTimersByTimeAsync(1000)
    release()
    await writing
    await vi.advanceTimersByTimeAsync(250)
    await gate.close()
    const writes = sink.events.flatMap((e) =>
      e.type === 'write' ? [new TextDecoder().decode(e.bytes)] : [],
    )
    for (const write of writes)
      expect([': keep-alive\n\n', new TextDecoder().decode(frame)]).toContain(write)
    expect(writes.indexOf(new TextDecoder().decode(frame))).toBeGreaterThanOrEqual(0)
  })

  it('turns a failed write into a terminal DownstreamClosedError and aborts its signal', async () => {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    sink.failWritesAfter(1, new Error('write EPIPE'))
    await gate.write(utf8('data: 1\n\n'))
    const error = await gate.write(utf8('data: 2\n\n')).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(DownstreamClosedError)
    expect(error).toMatchObject({ code: 'DOWNSTREAM_CLOSED', reason: 'write-failed' })
    expect(gate.signal.aborted).toBe(true)
    expect(gate.signal.reason).toBe(error)
    expect(gate.failure).toBe(error)
    expect(gate.state).toBe('closed')
    expect(sink.events.at(-1)?.type).toBe('abort')
    await expect(gate.write(utf8('data: 3\n\n'))).rejects.toBe(error)
  })

  it('reports the client going away as client-gone and stops its keep-alive timer', async () => {
    useFakeClock()
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, { keepAliveIntervalMs: 1000 })
    await gate.commitHeaders()
    sink.disconnect(new Error('socket hang up'))
    expect(gate.signal.reason).toMatchObject({ code: 'DOWNSTREAM_CLOSED', reason: 'client-gone' })
    expect(gate.canRetry).toBe(false)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('documents its defaults and validates options with exact messages', () => {
    expect(commitGateDefaults).toEqual({
      status: 200,
      earlyHeaders: false,
      keepAliveIntervalMs: 15_000,
      keepAliveAfterContent: true,
      writeStallTimeoutMs: 60_000,
    })
    expect(() => createCommitGate(createRecordingSink(), { status: 99 })).toThrow(
      'status must be an HTTP status from 200 to 599, got 99',
    )
    // The one rule for every bound: Infinity turns it off, 0 (like -1) is a RangeError.
    for (const bad of [-1, 0]) {
      expect(() => createCommitGate(createRecordingSink(), { keepAliveIntervalMs: bad })).toThrow(
        `keepAliveIntervalMs must be a positive number of milliseconds up to 2147483647, or Infinity to turn it off; got ${bad}`,
      )
    }
    expect(() =>
      createCommitGate(createRecordingSink(), { keepAliveIntervalMs: Number.POSITIVE_INFINITY }),
    ).not.toThrow()
  })
})

describe('gate.delivered: the sink ended the response normally', () => {
  /** A sink whose close resolves or rejects when the test says. */
  function closingSink() {
    const sink = createRecordingSink()
    let settle!: { resolve: () => void; reject: (error: unknown) => void }
    const closed = new Promise<void>((resolve, reject) => {
      settle = { resolve, reject }
    })
    return { sink: { ...sink, signal: sink.signal, close: () => closed }, settle }
  }

  it('is false while the close is pending and true once it resolved, whatever happens after', async () => {
    const { sink, settle } = closingSink()
    const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    await gate.write(utf8('data: x\n\n'))
    expect(gate.delivered).toBe(false)
    const closing = gate.close()
    await Promise.resolve()
    expect(gate.delivered).toBe(false)
    settle.resolve()
    await closing
    expect(gate.delivered).toBe(true)
    gate.abort(new Error('the host aborted afterwards'))
    expect(gate.delivered).toBe(true)
  })

  it('is false when the sink failed its close, or the gate was aborted while the sink closed', async () => {
    const failed = closingSink()
    const gate = createCommitGate(failed.sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    await gate.write(utf8('data: x\n\n'))
    const closing = gate.close()
    failed.settle.reject(new Error('the client closed the connection'))
    await closing
    expect([gate.delivered, gate.failure?.reason]).toEqual([false, 'write-failed'])

    const cut = closingSink()
    const other = createCommitGate(cut.sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
    await other.write(utf8('data: x\n\n'))
    const closingOther = other.close()
    other.abort(new Error('write stall'))
    cut.settle.resolve()
    await closingOther
    expect(other.delivered).toBe(false)
  })

  it('is true after a whole answer and after an error response, false before', async () => {
    const gate = createCommitGate(createRecordingSink())
    expect(gate.delivered).toBe(false)
    await gate.answer(200, utf8('{"ok":true}'), 'application/json')
    expect(gate.delivered).toBe(true)
    const refused = createCommitGate(createRecordingSink())
    await refused.respond(502, '{"error":{}}')
    expect(refused.delivered).toBe(true)
  })
})
