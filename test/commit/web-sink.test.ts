/**
 * `webSink` consumed as a real Web `Response`: the response appears when headers commit, its
 * body honours the consumer's pull, cancelling it is the client-gone signal, and failures
 * before content become a real status or an in-band error frame.
 */
import { describe, expect, it } from 'vitest'
import type { DeliverOutcome } from '../../src/advanced.js'
import {
  createCommitGate,
  DownstreamClosedError,
  deliver,
  failBeforeContent,
  openaiChat,
  webSink,
} from '../../src/index.js'
import { text, utf8 } from '../support/sources.js'

const quiet = { keepAliveIntervalMs: Number.POSITIVE_INFINITY }

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Whether `promise` settles (either way) within `ms`. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms)
  })
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      timeout,
    ])
  } finally {
    clearTimeout(timer)
  }
}

function bodyOf(response: Response): ReadableStream<Uint8Array> {
  if (response.body === null) throw new Error('the response has no body')
  return response.body
}

const frames = ['data: {"n":1}\n\n', 'event: delta\ndata: {"n":2}\n\n', 'data: "héllo ✓"\n\n']

describe('webSink as a real Response', () => {
  it('resolves the response only when headers commit; the body carries the writes and ends on close()', async () => {
    const { sink, response } = webSink()
    const gate = createCommitGate(sink, quiet)
    expect(await settlesWithin(response, 30)).toBe(false)

    await gate.commitHeaders()
    expect(await settlesWithin(response, 30)).toBe(true)
    const res = await response
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    expect(res.headers.get('cache-control')).toBe('no-cache, no-transform')
    expect(res.headers.get('x-accel-buffering')).toBe('no')

    const reader = bodyOf(res).getReader()
    const received: string[] = []
    for (const frame of frames) {
      await gate.write(utf8(frame))
      const { done, value } = await reader.read()
      expect(done).toBe(false)
      received.push(text(value ?? new Uint8Array()))
    }
    expect(received).toEqual(frames)

    await gate.close()
    expect(await reader.read()).toEqual({ done: true, value: undefined })
    expect(gate.state).toBe('closed')
    expect(gate.bytesWritten).toBe(utf8(frames.join('')).length)
  })

  it('backpressure: with highWaterMark 16, a 32-byte write waits until the consumer reads', async () => {
    const { sink, response } = webSink({ highWaterMark: 16 })
    const gate = createCommitGate(sink, quiet)
    await gate.commitHeaders()
    const reader = bodyOf(await response).getReader()

    const chunk = utf8('data: 0123456789abcdefghijklmn\n\n')
    expect(chunk.length).toBe(32)
    let readStarted = false
    let resolvedAfterRead: boolean | undefined
    const written = gate.write(chunk).then(() => {
      resolvedAfterRead = readStarted
    })
    await sleep(50)
    expect(resolvedAfterRead).toBeUndefined()

    readStarted = true
    const { value } = await reader.read()
    expect(value).toEqual(chunk)
    expect(await settlesWithin(written, 200)).toBe(true)
    expect(resolvedAfterRead).toBe(true)

    // A small write fits under the mark and does not wait.
    const small = utf8('data: 1\n\n')
    expect(await settlesWithin(gate.write(small), 20)).toBe(true)
    await gate.close()
    expect((await reader.read()).value).toEqual(small)
    expect((await reader.read()).done).toBe(true)
  })

  it('cancelling the body aborts sink.signal and gate.signal (client-gone); a pending write rejects', async () => {
    const { sink, response } = webSink({ highWaterMark: 16 })
    const gate = createCommitGate(sink, quiet)
    await gate.commitHeaders()
    const res = await response

    const pending = gate.write(new Uint8Array(64))
    const outcome = pending.then(
      () => 'resolved',
      (error: unknown) => error,
    )
    expect(await settlesWithin(pending, 30)).toBe(false)

    await bodyOf(res).cancel('bye')
    expect(sink.signal.aborted).toBe(true)
    expect(sink.signal.reason).toBe('bye')
    expect(gate.signal.aborted).toBe(true)
    const failure = gate.signal.reason
    expect(failure).toBeInstanceOf(DownstreamClosedError)
    expect((failure as DownstreamClosedError).reason).toBe('client-gone')
    expect((failure as DownstreamClosedError).cause).toBe('bye')
    expect(await outcome).toBe(failure)
    await expect(gate.write(new Uint8Array(1))).rejects.toBe(failure)
    expect(gate.canRetry).toBe(false)
  })

  it('respond(503) resolves the response to a real 503 with the JSON body', async () => {
    const { sink, response } = webSink()
    const gate = createCommitGate(sink, quiet)
    const body = '{"error":{"type":"overloaded","message":"try later"}}'
    await gate.respond(503, body)
    const res = await response
    expect(res.status).toBe(503)
    expect(res.headers.get('content-type')).toBe('application/json')
    expect(await res.json()).toEqual(JSON.parse(body))
    expect(gate.state).toBe('closed')
  })

  it('aborting before headers rejects the response', async () => {
    const { sink, response } = webSink()
    const gate = createCommitGate(sink, quiet)
    const reason = new Error('x')
    gate.abort(reason)
    await expect(response).rejects.toBe(reason)
    expect(gate.state).toBe('closed')
  })

  it('a rejected response the host never awaited is no unhandled rejection; one awaited later still rejects', async () => {
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown) => unhandled.push(reason)
    process.on('unhandledRejection', onUnhandled)
    const reason = new Error('client gone before the head')
    let late: Promise<Response>
    try {
      const { sink, response } = webSink()
      createCommitGate(sink, quiet).abort(reason)
      late = response
      // Past the microtasks and a macrotask: when Node reports unhandled rejections.
      await sleep(20)
    } finally {
      process.off('unhandledRejection', onUnhandled)
    }
    expect(unhandled).toEqual([])
    await expect(late).rejects.toBe(reason)
  })

  it('deliver() with earlyHeaders: the response comes first; keep-alives only time out; the error is written in-band', async () => {
    const { sink, response } = webSink()
    const gate = createCommitGate(sink, { ...quiet, earlyHeaders: true })

    let release!: () => void
    const released = new Promise<void>((resolve) => {
      release = resolve
    })
    let sent = 0
    let cancelled = false
    const keepAlive = utf8(': keep-alive\n\n')
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        await released
        await sleep(15)
        sent++
        controller.enqueue(keepAlive)
      },
      cancel() {
        cancelled = true
      },
    })

    const delivered: Promise<DeliverOutcome> = deliver({
      gate,
      body,
      adapter: openaiChat,
      peek: { firstOutputTimeoutMs: 100 },
    })
    const res = await response
    expect(sent).toBe(0)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    expect(gate.state).toBe('headers-committed')
    release()

    const outcome = await delivered
    expect(outcome.kind).toBe('not-committed')
    if (outcome.kind !== 'not-committed') return
    expect(outcome.peek.kind).toBe('first-output-timeout')
    expect(sent).toBeGreaterThan(0)
    expect(cancelled).toBe(true)
    expect(gate.bytesWritten).toBe(0)
    expect(gate.canRetry).toBe(true)

    const error = { type: 'timeout', message: 'no output' }
    await failBeforeContent(gate, openaiChat, 504, error)
    const written = await res.text()
    expect(written).toBe(text(openaiChat.renderError(error)))
    expect(written).not.toContain('keep-alive')
    expect(gate.state).toBe('closed')
  })
  it('gate.abort() after headers errors the body: the consumer sees a failure, not a clean end', async () => {
    const { sink, response } = webSink()
    const gate = createCommitGate(sink, quiet)
    await gate.write(utf8(frames[0] as string))
    const reader = bodyOf(await response).getReader()
    expect(text((await reader.read()).value ?? new Uint8Array())).toBe(frames[0])

    const reason = new Error('the relay gave up')
    gate.abort(reason)
    await expect(reader.read()).rejects.toBe(reason)
  })

  it('writes issued without awaiting keep their order, also before headers are committed', async () => {
    const { sink, response } = webSink()
    const gate = createCommitGate(sink, quiet)
    // A host may fire writes like stream.write() and await them together; the gate queues
    // every sink operation, so the client must see them in call order.
    const writes = frames.map((frame) => gate.write(utf8(frame)))
    await Promise.all(writes)
    await gate.close()
    expect(await (await response).text()).toBe(frames.join(''))
  })
})

describe('webSink and the write-stall bound', () => {
  const frameOf = (size: number) =>
    `data: {"choices":[{"index":0,"delta":{"content":"${'x'.repeat(size)}"},"finish_reason":null}]}\n\n`
  const ending =
    'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'

  it('a consumer still pulling is not cut while one large write waits longer than the bound', async () => {
    // Three 40 KiB chunks fill the 128 KiB queue, then a 512 KiB one waits until the consumer,
    // pulling one chunk every 150 ms, has taken all four: ~600 ms, past a 400 ms bound.
    const { sink, response } = webSink({ highWaterMark: 128 * 1024 })
    const gate = createCommitGate(sink, quiet)
    const small = frameOf(40 * 1024)
    const chunks = [small, small, small, frameOf(512 * 1024) + ending]
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = chunks.shift()
        if (next === undefined) controller.close()
        else controller.enqueue(utf8(next))
      },
    })
    const delivered = deliver({ gate, body, adapter: openaiChat, writeStallTimeoutMs: 400 })
    const reader = (await response).body?.getReader()
    if (reader === undefined) throw new Error('expected a body')
    let taken = 0
    for (;;) {
      await sleep(150)
      const { done, value } = await reader.read()
      if (done) break
      taken += value.length
      expect(sink.bytesTaken?.()).toBe(taken)
    }
    const outcome: DeliverOutcome = await delivered
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({ kind: 'completed' })
    expect(taken).toBe(3 * small.length + frameOf(512 * 1024).length + ending.length)
  })
})
