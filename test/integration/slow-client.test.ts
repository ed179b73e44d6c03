/**
 * Invariant 14 over a real socket: a healthy upstream streams to a client that stops reading.
 * The server is `node:http` + `nodeSink` + `deliver`; the client is a raw `net` socket that
 * pauses, so the kernel buffers fill and the gate's writes really block on backpressure.
 * Node cannot shrink a TCP socket's buffers, so the frames are large instead (~5 MiB in all,
 * past what loopback buffers hold).
 */
import { createServer, type Server } from 'node:http'
import { type AddressInfo, connect, type Socket } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import type { DeliverOutcome } from '../../src/advanced.js'
import { createCommitGate, deliver, openaiChat } from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import {
  type ScriptedBody,
  type ScriptStep,
  scriptedBody,
} from '../../src/testing/scripted-body.js'

const frameCount = 20
const wordBytes = 256 * 1024
const word = (index: number) => String.fromCharCode(97 + index).repeat(wordBytes)
const frame = (index: number) =>
  `data: {"choices":[{"index":0,"delta":{"content":"${word(index)}"},"finish_reason":null}]}\n\n`
const ending =
  'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'

/** A healthy upstream: 20 large frames 50 ms apart, then a clean end. */
function healthyUpstream(): ScriptedBody {
  const steps: ScriptStep[] = []
  for (let i = 0; i < frameCount; i++) steps.push({ wait: 50 }, { bytes: frame(i) })
  steps.push({ bytes: ending })
  return scriptedBody(steps)
}

interface Served {
  readonly port: number
  readonly upstream: ScriptedBody
  readonly outcome: Promise<DeliverOutcome>
  /** The longest time one sink write waited for the client, in ms. */
  longestBlockMs(): number
}

const servers: Server[] = []
const sockets: Socket[] = []
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy()
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
})

async function serve(
  policy: { idleTimeoutMs: number; writeStallTimeoutMs: number },
  upstream: ScriptedBody = healthyUpstream(),
) {
  let longest = 0
  let resolveOutcome!: (outcome: DeliverOutcome) => void
  let rejectOutcome!: (reason: unknown) => void
  const outcome = new Promise<DeliverOutcome>((resolve, reject) => {
    resolveOutcome = resolve
    rejectOutcome = reject
  })
  const server = createServer((_req, res) => {
    const sink = nodeSink(res)
    const timedSink = {
      ...sink,
      write(chunk: Uint8Array) {
        const started = performance.now()
        const written = sink.write(chunk)
        written?.then(
          () => {
            longest = Math.max(longest, performance.now() - started)
          },
          () => {},
        )
        return written
      },
    }
    const gate = createCommitGate(timedSink, {
      keepAliveIntervalMs: Number.POSITIVE_INFINITY,
      writeStallTimeoutMs: policy.writeStallTimeoutMs,
    })
    deliver({ gate, body: upstream.stream, adapter: openaiChat, ...policy }).then(
      resolveOutcome,
      rejectOutcome,
    )
  })
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return { port, upstream, outcome, longestBlockMs: () => longest } satisfies Served
}

interface ClientRun {
  /** Every byte the client received, head included. */
  readonly raw: Buffer
  /** Whether the socket ended in an error (a reset) rather than after the last chunk. */
  readonly errored: boolean
}

/**
 * Requests, takes the first bytes, pauses reading for `pauseMs` (or until `resume()`), then
 * reads to the end. A paused socket does not see the server close it until it reads again.
 */
function slowClient(port: number, pauseMs: number) {
  const parts: Buffer[] = []
  let errored = false
  const socket = connect(port, '127.0.0.1', () => {
    socket.write('GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n')
  })
  sockets.push(socket)
  let timer: ReturnType<typeof setTimeout> | undefined
  socket.once('data', () => {
    socket.pause()
    timer = setTimeout(() => socket.resume(), pauseMs)
  })
  socket.on('data', (data: Buffer) => parts.push(data))
  socket.on('error', () => {
    errored = true
  })
  const done = new Promise<ClientRun>((resolve) => {
    socket.on('close', () => {
      clearTimeout(timer)
      resolve({ raw: Buffer.concat(parts), errored })
    })
  })
  return {
    done,
    resume() {
      clearTimeout(timer)
      socket.resume()
    },
  }
}

/**
 * Reads steadily at about `bytesPerSecond`: after each chunk the socket hands over, it pauses
 * for as long as that chunk takes at the rate (a chunk is at most 64 KiB: Node reads no more
 * at once), so the kernel's buffers fill and the server sees the client only by its pace.
 */
function steadyClient(port: number, bytesPerSecond: number) {
  const parts: Buffer[] = []
  let errored = false
  let timer: ReturnType<typeof setTimeout> | undefined
  const socket = connect(port, '127.0.0.1', () => {
    socket.write('GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n')
  })
  sockets.push(socket)
  socket.on('data', (data: Buffer) => {
    parts.push(data)
    socket.pause()
    timer = setTimeout(() => socket.resume(), (data.length / bytesPerSecond) * 1000)
  })
  socket.on('error', () => {
    errored = true
  })
  return new Promise<ClientRun>((resolve) => {
    socket.on('close', () => {
      clearTimeout(timer)
      resolve({ raw: Buffer.concat(parts), errored })
    })
  })
}

/** The body of a chunked HTTP/1.1 response, and whether it ended with the last chunk. */
function dechunk(raw: Buffer): { body: string; complete: boolean } {
  let at = raw.indexOf('\r\n\r\n') + 4
  const parts: Buffer[] = []
  for (;;) {
    const lineEnd = raw.indexOf('\r\n', at)
    if (lineEnd < 0) return { body: Buffer.concat(parts).toString(), complete: false }
    const size = Number.parseInt(raw.subarray(at, lineEnd).toString(), 16)
    if (size === 0) return { body: Buffer.concat(parts).toString(), complete: true }
    if (lineEnd + 2 + size > raw.length) {
      parts.push(raw.subarray(lineEnd + 2))
      return { body: Buffer.concat(parts).toString(), complete: false }
    }
    parts.push(raw.subarray(lineEnd + 2, lineEnd + 2 + size))
    at = lineEnd + 2 + size + 2
  }
}

describe('a client that stops reading, over a real socket', () => {
  it('pausing longer than idleTimeoutMs but shorter than writeStallTimeoutMs: every frame, then a clean end', async () => {
    const idleTimeoutMs = 500
    const served = await serve({ idleTimeoutMs, writeStallTimeoutMs: 6_000 })
    const client = await slowClient(served.port, 2_500).done
    const outcome = await served.outcome

    // The scenario is real: a write waited on the client far longer than the idle bound.
    expect(served.longestBlockMs()).toBeGreaterThan(2 * idleTimeoutMs)
    expect(outcome.kind).toBe('committed')
    if (outcome.kind !== 'committed') return
    expect(outcome.pump.end).toEqual({ kind: 'completed' })
    const { body, complete } = dechunk(client.raw)
    expect(complete).toBe(true)
    expect(client.errored).toBe(false)
    for (let i = 0; i < frameCount; i++) expect(body).toContain(frame(i))
    expect(body.endsWith(ending)).toBe(true)
    expect(served.upstream.cancelled).toBe(false)
  })

  it('a client reading steadily but slower than one write drains: never cut, every frame, a clean end', async () => {
    // 96 frames (24 MiB) in one upstream chunk: one write, past what loopback buffers hold
    // (~4-10 MiB), which the client takes at 6 MiB/s: the write waits seconds on a client
    // that never stops taking bytes, with a 1 s bound on taking none.
    const writeStallTimeoutMs = 1_000
    const frames = Array.from({ length: 96 }, (_, i) => frame(i % 26))
    const oneChunk = scriptedBody([{ bytes: frames.join('') + ending }])
    const served = await serve({ idleTimeoutMs: 500, writeStallTimeoutMs }, oneChunk)
    const client = await steadyClient(served.port, 6 * 1024 * 1024)
    const outcome = await served.outcome

    // The scenario is real: the one write waited on the client longer than the bound.
    expect(served.longestBlockMs()).toBeGreaterThan(writeStallTimeoutMs)
    expect(outcome.kind === 'committed' && outcome.pump.end).toEqual({ kind: 'completed' })
    const { body, complete } = dechunk(client.raw)
    expect(complete).toBe(true)
    expect(client.errored).toBe(false)
    expect(body).toBe(frames.join('') + ending)
    expect(oneChunk.cancelled).toBe(false)
  })

  it('pausing past writeStallTimeoutMs: cut, the upstream body cancelled, the end downstream-stalled', async () => {
    const writeStallTimeoutMs = 1_000
    const served = await serve({ idleTimeoutMs: 500, writeStallTimeoutMs })
    const client = slowClient(served.port, 60_000)
    const outcome = await served.outcome

    expect(outcome.kind).toBe('committed')
    if (outcome.kind !== 'committed') return
    expect(outcome.pump.end).toMatchObject({
      kind: 'downstream-stalled',
      error: {
        code: 'WRITE_STALL_TIMEOUT',
        timeout: 'write-stall',
        timeoutMs: writeStallTimeoutMs,
      },
    })
    expect(outcome.pump.durationMs).toBeGreaterThanOrEqual(writeStallTimeoutMs)
    expect(served.upstream.cancelled).toBe(true)
    expect(served.upstream.chunksSent).toBeLessThan(frameCount + 1)
    // The client sees a cut connection, never a clean end of the body.
    client.resume()
    const run = await client.done
    expect(dechunk(run.raw).complete).toBe(false)
  })
})
