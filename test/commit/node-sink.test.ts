/**
 * `nodeSink` over a real `http.Server` on 127.0.0.1, read by the real global `fetch` and by
 * the real `openai` SDK: headers, exact bytes, status answers, socket backpressure and a
 * client that goes away mid-stream.
 */
import { createHash } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import type { CommitGate, DeliverOutcome } from '../../src/advanced.js'
import {
  createCommitGate,
  DownstreamClosedError,
  type DownstreamSink,
  deliver,
  openaiChat,
} from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { fixtureBytes, fixtures } from '../protocols/fixtures.js'
import { text, utf8 } from '../support/sources.js'

// --- harness ------------------------------------------------------------------------------

type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void>

const servers: Server[] = []

/** Starts a server on an ephemeral port; a handler's failure is kept in `failures`. */
async function serve(
  handler: Handler,
): Promise<{ url: string; port: number; failures: unknown[] }> {
  const failures: unknown[] = []
  const server = createServer((req, res) => {
    req.resume()
    handler(req, res).catch((error: unknown) => {
      failures.push(error)
      res.destroy()
    })
  })
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}`, port, failures }
}

afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
})

interface Deferred<T> {
  promise: Promise<T>
  resolve: (value: T) => void
  reject: (reason: unknown) => void
}

function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void
  let reject!: (reason: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

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

/** `promise`, or a rejection naming `what` after `ms`, so a broken transport fails, not hangs. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

function bodyOf(response: Response): ReadableStream<Uint8Array> {
  if (response.body === null) throw new Error('the response has no body')
  return response.body
}

/** Reads until at least `length` bytes arrived; returns them. */
async function readAtLeast(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  length: number,
): Promise<Uint8Array> {
  const parts: Uint8Array[] = []
  let got = 0
  while (got < length) {
    const { done, value } = await reader.read()
    if (done) break
    parts.push(value)
    got += value.length
  }
  return Buffer.concat(parts)
}

const quiet = { keepAliveIntervalMs: Number.POSITIVE_INFINITY }

const chunkBytes = 256 * 1024
/** 400 chunks of 256 KiB = 100 MiB: far beyond any loopback socket buffer. */
const maxChunks = 400

/** A deterministic 256 KiB chunk, different for every index. */
function bigChunk(index: number): Uint8Array {
  const bytes = new Uint8Array(chunkBytes)
  for (let i = 0; i < bytes.length; i++) bytes[i] = (index * 131 + i * 7 + (i >>> 11)) & 0xff
  return bytes
}

const sseFrames = [
  'data: {"n":1}\n\n',
  'event: delta\ndata: {"n":2}\n\n',
  'data: {"n":3,"text":"héllo ✓"}\n\n',
]

const chatFixture = fixtureBytes('openai-chat/text.sse')
/** The fixture split into whole frames, one per chunk. */
const chatFrames = text(chatFixture)
  .split(/(?<=\n\n)/)
  .map(utf8)
const chatText = fixtures.find((f) => f.file === 'openai-chat/text.sse')?.text

// --- tests --------------------------------------------------------------------------------

describe('nodeSink over a real http.Server', () => {
  it('a client that left before nodeSink(res) was made: relay() sees it at once, no attempt, client-gone', async () => {
    const { createMemoryKeyPool, relay } = await import('../../src/index.js')
    const outcome = deferred<Awaited<ReturnType<typeof relay>>>()
    let attempts = 0
    const left = deferred<void>()
    const { url } = await serve(async (_req, res) => {
      // The host reads the body and works; meanwhile the client leaves.
      await new Promise<void>((resolve) => res.once('close', () => resolve()))
      left.resolve()
      const pool = createMemoryKeyPool([{ id: 'only', secret: 'sk-test-0123456789' }])
      outcome.resolve(
        await relay({
          sink: nodeSink(res),
          pool,
          adapter: openaiChat,
          attempt: async () => {
            attempts++
            return new Response(chatText)
          },
        }),
      )
    })
    const client = new AbortController()
    const request = fetch(url, { method: 'POST', body: '{}', signal: client.signal }).catch(
      () => undefined,
    )
    setTimeout(() => client.abort(), 100)
    await request
    await left.promise
    expect(await within(outcome.promise, 2_000, 'the outcome')).toMatchObject({
      kind: 'client-gone',
      attempts: [],
    })
    expect(attempts).toBe(0)
  })

  it('sends the SSE head, the exact bytes of three frames, and ends the response', async () => {
    const { url, failures } = await serve(async (_req, res) => {
      const gate = createCommitGate(nodeSink(res), quiet)
      await gate.commitHeaders()
      for (const frame of sseFrames) await gate.write(utf8(frame))
      await gate.close()
    })

    const response = await fetch(url)
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    expect(response.headers.get('cache-control')).toBe('no-cache, no-transform')
    expect(response.headers.get('x-accel-buffering')).toBe('no')
    const bytes = new Uint8Array(await response.arrayBuffer())
    expect(Buffer.from(bytes).equals(Buffer.from(utf8(sseFrames.join(''))))).toBe(true)
    expect(failures).toEqual([])
  })

  it('flushes the head before any content: the client has the Response while no byte was written', async () => {
    const release = deferred()
    let bodyWritten = false
    let gate: CommitGate | undefined
    const { url, failures } = await serve(async (_req, res) => {
      gate = createCommitGate(nodeSink(res), quiet)
      await gate.commitHeaders()
      await release.promise
      bodyWritten = true
      await gate.write(utf8(sseFrames[0] as string))
      await gate.close()
    })

    const response = await within(fetch(url), 2_000, 'the response head')
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    expect(bodyWritten).toBe(false)
    expect(gate?.state).toBe('headers-committed')
    expect(gate?.bytesWritten).toBe(0)

    release.resolve()
    expect(await response.text()).toBe(sseFrames[0])
    expect(failures).toEqual([])
  })

  it('answers a real status with respond(): 502, application/json, the body', async () => {
    const body = '{"error":{"type":"upstream_error","message":"bad gateway"}}'
    const { url, failures } = await serve(async (_req, res) => {
      const gate = createCommitGate(nodeSink(res), quiet)
      await gate.respond(502, body)
      expect(gate.state).toBe('closed')
    })

    const response = await fetch(url)
    expect(response.status).toBe(502)
    expect(response.headers.get('content-type')).toBe('application/json')
    expect(response.headers.get('cache-control')).toBe('no-store')
    expect(await response.text()).toBe(body)
    expect(failures).toEqual([])
  })

  it('backpressure: a write waits while the client reads nothing, then resumes; every byte arrives', async () => {
    const chunksAfterStall = 8

    const stalled = deferred<number>()
    const done = deferred<{ bytes: number; sha256: string; resolvedWhileReading: boolean }>()
    let clientReading = false
    const { url, failures } = await serve(async (_req, res) => {
      const gate = createCommitGate(nodeSink(res), quiet)
      await gate.commitHeaders()
      const hash = createHash('sha256')
      let bytes = 0
      let resolvedWhileReading = false
      let stalledAt: number | undefined
      for (let i = 0; i < maxChunks; i++) {
        if (stalledAt !== undefined && i > stalledAt + chunksAfterStall) break
        const next = bigChunk(i)
        hash.update(next)
        bytes += next.length
        const written = gate.write(next)
        if (stalledAt === undefined && !(await settlesWithin(written, 200))) {
          stalledAt = i
          stalled.resolve(i)
          await written
          resolvedWhileReading = clientReading
        } else {
          await written
        }
      }
      if (stalledAt === undefined) stalled.reject(new Error('no write ever waited'))
      await gate.close()
      done.resolve({ bytes, sha256: hash.digest('hex'), resolvedWhileReading })
    })

    const response = await fetch(url)
    expect(response.status).toBe(200)
    const stalledAt = await within(stalled.promise, 20_000, 'a pending write')
    // The write is still pending a little later: the socket really is full.
    await sleep(50)
    clientReading = true

    const hash = createHash('sha256')
    let received = 0
    const reader = bodyOf(response).getReader()
    for (;;) {
      const { done: finished, value } = await reader.read()
      if (finished) break
      hash.update(value)
      received += value.length
    }
    const sent = await within(done.promise, 5_000, 'the end of the server loop')
    console.log(
      `backpressure: a write first waited at chunk ${stalledAt} (${((stalledAt * chunkBytes) / 2 ** 20).toFixed(1)} MiB buffered)`,
    )
    expect(sent.resolvedWhileReading).toBe(true)
    expect(received).toBe(sent.bytes)
    expect(received).toBe((stalledAt + chunksAfterStall + 1) * chunkBytes)
    expect(hash.digest('hex')).toBe(sent.sha256)
    expect(failures).toEqual([])
  })

  it('client disconnect: sink.signal and gate.signal abort (client-gone) and writes reject', async () => {
    const frame = utf8(sseFrames[0] as string)
    const server = deferred<{ sink: DownstreamSink; gate: CommitGate }>()
    const gateAborted = deferred<number>()
    const { url, failures } = await serve(async (_req, res) => {
      const sink = nodeSink(res)
      const gate = createCommitGate(sink, quiet)
      gate.signal.addEventListener('abort', () => gateAborted.resolve(performance.now()), {
        once: true,
      })
      await gate.write(frame)
      server.resolve({ sink, gate })
    })

    const client = new AbortController()
    const response = await fetch(url, { signal: client.signal })
    const reader = bodyOf(response).getReader()
    expect(text(await readAtLeast(reader, frame.length))).toBe(sseFrames[0])
    const { sink, gate } = await server.promise
    expect(gate.signal.aborted).toBe(false)

    const abortedAt = performance.now()
    client.abort()
    await reader.read().catch(() => {})
    const gateAbortedAt = await within(gateAborted.promise, 3_000, 'gate.signal abort')
    const delay = gateAbortedAt - abortedAt
    console.log(`node sink: client abort → gate.signal abort in ${delay.toFixed(1)} ms`)

    expect(sink.signal.aborted).toBe(true)
    const failure = gate.signal.reason
    expect(failure).toBeInstanceOf(DownstreamClosedError)
    expect((failure as DownstreamClosedError).reason).toBe('client-gone')
    expect((failure as DownstreamClosedError).cause).toBe(sink.signal.reason)
    expect(gate.failure).toBe(failure)
    expect(gate.state).toBe('closed')
    await expect(gate.write(frame)).rejects.toBe(failure)
    expect(delay).toBeGreaterThanOrEqual(0)
    expect(delay).toBeLessThan(1_000)
    expect(failures).toEqual([])
  })

  it('deliver(): the client gets the exact fixture bytes, and the openai SDK reads the text', async () => {
    expect(Buffer.concat(chatFrames).equals(Buffer.from(chatFixture))).toBe(true)
    expect(chatFrames.length).toBe(7)
    expect(chatText).toBe('The capital of France is Paris.')

    const outcomes: DeliverOutcome[] = []
    const { url, port, failures } = await serve(async (_req, res) => {
      let index = 0
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          await sleep(5)
          const frame = chatFrames[index++]
          if (frame === undefined) controller.close()
          else controller.enqueue(frame)
        },
      })
      const gate = createCommitGate(nodeSink(res), quiet)
      outcomes.push(await deliver({ gate, body, adapter: openaiChat }))
    })

    const response = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: '{}' })
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    const bytes = Buffer.from(await response.arrayBuffer())
    expect(bytes.equals(Buffer.from(chatFixture))).toBe(true)

    const client = new OpenAI({
      apiKey: 'sk-test',
      baseURL: `http://127.0.0.1:${port}/v1`,
      maxRetries: 0,
    })
    const stream = await client.chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    })
    let answer = ''
    for await (const chunk of stream) answer += chunk.choices[0]?.delta?.content ?? ''
    expect(answer).toBe(chatText)

    await within(
      (async () => {
        while (outcomes.length < 2) await sleep(5)
      })(),
      2_000,
      'both deliver() outcomes',
    )
    for (const outcome of outcomes) {
      expect(outcome.kind).toBe('committed')
      if (outcome.kind === 'committed') {
        expect(outcome.pump.end.kind).toBe('completed')
        expect(outcome.pump.bytes).toBe(chatFixture.length)
      }
    }
    expect(failures).toEqual([])
  })

  it('client disconnect during deliver(): the upstream is cancelled and the pump ends client-gone', async () => {
    const first = chatFrames[1] as Uint8Array // the first text delta
    const cancelled = deferred<{ at: number; reason: unknown }>()
    const outcome = deferred<DeliverOutcome>()
    const { url, failures } = await serve(async (_req, res) => {
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(first)
          // and then nothing, ever
        },
        cancel(reason) {
          cancelled.resolve({ at: performance.now(), reason })
        },
      })
      const gate = createCommitGate(nodeSink(res), quiet)
      outcome.resolve(await deliver({ gate, body, adapter: openaiChat }))
    })

    const client = new AbortController()
    const response = await fetch(url, { signal: client.signal })
    const reader = bodyOf(response).getReader()
    expect(Buffer.from(await readAtLeast(reader, first.length)).equals(Buffer.from(first))).toBe(
      true,
    )

    const abortedAt = performance.now()
    client.abort()
    await reader.read().catch(() => {})
    const cancel = await within(cancelled.promise, 3_000, 'the upstream cancel')
    const delay = cancel.at - abortedAt
    console.log(`node sink: client abort → upstream cancel in ${delay.toFixed(1)} ms`)
    expect(delay).toBeGreaterThanOrEqual(0)
    expect(delay).toBeLessThan(1_000)

    const delivered = await within(outcome.promise, 3_000, 'deliver() to resolve')
    expect(delivered.kind).toBe('committed')
    if (delivered.kind !== 'committed') return
    expect(delivered.pump.end.kind).toBe('client-gone')
    if (delivered.pump.end.kind === 'client-gone') {
      expect(delivered.pump.end.error.reason).toBe('client-gone')
      expect(cancel.reason).toBe(delivered.pump.end.error)
    }
    expect(delivered.pump.bytes).toBe(first.length)
    expect(failures).toEqual([])
  })
  it('client disconnect while a write waits on backpressure: the write rejects with client-gone', async () => {
    const stalled = deferred<{ gate: CommitGate; pending: Promise<unknown> }>()
    const { url, failures } = await serve(async (_req, res) => {
      const gate = createCommitGate(nodeSink(res), quiet)
      await gate.commitHeaders()
      for (let i = 0; i < maxChunks; i++) {
        const written = gate.write(bigChunk(i))
        if (!(await settlesWithin(written, 200))) {
          stalled.resolve({
            gate,
            pending: written.then(
              () => 'resolved',
              (error: unknown) => error,
            ),
          })
          return
        }
      }
      stalled.reject(new Error('no write ever waited'))
    })

    const client = new AbortController()
    const response = await fetch(url, { signal: client.signal })
    expect(response.status).toBe(200)
    const { gate, pending } = await within(stalled.promise, 20_000, 'a pending write')
    const abortedAt = performance.now()
    client.abort()
    const settled = await within(pending, 3_000, 'the pending write to settle')
    console.log(
      `node sink: client abort → pending write rejected in ${(performance.now() - abortedAt).toFixed(1)} ms`,
    )
    expect(settled).toBeInstanceOf(DownstreamClosedError)
    expect((settled as DownstreamClosedError).reason).toBe('client-gone')
    expect(gate.signal.reason).toBe(settled)
    expect(failures).toEqual([])
  })

  it('client disconnect before commit: deliver() is not committed, the peek aborted, the upstream cancelled', async () => {
    const preamble = chatFrames[0] as Uint8Array // role only: no output yet
    const peeking = deferred()
    const cancelled = deferred<number>()
    const outcome = deferred<DeliverOutcome>()
    let gate: CommitGate | undefined
    const { url, failures } = await serve(async (_req, res) => {
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(preamble)
        },
        pull() {
          // The preamble was read: the peek now waits for output that never comes.
          peeking.resolve()
        },
        cancel() {
          cancelled.resolve(performance.now())
        },
      })
      gate = createCommitGate(nodeSink(res), quiet)
      outcome.resolve(await deliver({ gate, body, adapter: openaiChat }))
    })

    const client = new AbortController()
    const request = fetch(url, { signal: client.signal })
    const rejected = request.then(
      () => 'resolved',
      (error: unknown) => error,
    )
    await within(peeking.promise, 3_000, 'the peek to start waiting')
    const abortedAt = performance.now()
    client.abort()
    expect(await rejected).not.toBe('resolved')

    const delay = (await within(cancelled.promise, 3_000, 'the upstream cancel')) - abortedAt
    console.log(`node sink: client abort before commit → upstream cancel in ${delay.toFixed(1)} ms`)
    expect(delay).toBeLessThan(1_000)
    const delivered = await within(outcome.promise, 3_000, 'deliver() to resolve')
    expect(delivered.kind).toBe('not-committed')
    if (delivered.kind === 'not-committed') {
      expect(delivered.peek.kind).toBe('aborted')
      if (delivered.peek.kind === 'aborted') {
        expect(delivered.peek.reason).toBeInstanceOf(DownstreamClosedError)
        expect((delivered.peek.reason as DownstreamClosedError).reason).toBe('client-gone')
      }
    }
    expect(gate?.bytesWritten).toBe(0)
    expect(failures).toEqual([])
  })

  it('gate.abort() after content: the client sees a broken body, not a clean end', async () => {
    const frame = utf8(sseFrames[0] as string)
    const { url, failures } = await serve(async (_req, res) => {
      const gate = createCommitGate(nodeSink(res), quiet)
      await gate.write(frame)
      await sleep(20)
      gate.abort(new Error('the relay gave up'))
    })

    const response = await fetch(url)
    expect(response.status).toBe(200)
    const reader = bodyOf(response).getReader()
    expect(text(await readAtLeast(reader, frame.length))).toBe(sseFrames[0])
    const end = await reader.read().then(
      (result) => (result.done ? 'clean end' : 'more data'),
      (error: unknown) => error,
    )
    expect(end).toBeInstanceOf(Error)
    expect(failures).toEqual([])
  })

  it('keep-alive comments reach the client while idle after headers and are not counted as content', async () => {
    const frame = utf8(sseFrames[0] as string)
    let gate: CommitGate | undefined
    const { url, failures } = await serve(async (_req, res) => {
      gate = createCommitGate(nodeSink(res), { keepAliveIntervalMs: 20 })
      await gate.commitHeaders()
      await sleep(90)
      await gate.write(frame)
      await gate.close()
    })

    const response = await fetch(url)
    const body = await response.text()
    const keepAlives = body.slice(0, body.length - frame.length)
    expect(body.endsWith(sseFrames[0] as string)).toBe(true)
    expect(keepAlives).toMatch(/^(: keep-alive\n\n)+$/)
    expect(gate?.bytesWritten).toBe(frame.length)
    expect(failures).toEqual([])
  })
})
