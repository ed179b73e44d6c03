/**
 * The write-stall bound on every sink, against a real client that reads steadily and then
 * stops: `nodeSink` on `node:http`, `fastifySink` in Fastify, `nodeSink` on Express's `res`
 * (all over a raw socket on 127.0.0.1), and `webSink` with a consumer in the process. The
 * client's last byte is what the sink's own count last showed, sampled every 5 ms by the test;
 * the cut must come within the bound and one look (a quarter of it here) of that byte, and
 * never before the bound.
 */
import { createServer, type Server, type ServerResponse } from 'node:http'
import { type AddressInfo, connect, type Socket } from 'node:net'
import express from 'express'
import Fastify from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import type { DeliverOutcome } from '../../src/advanced.js'
import {
  createCommitGate,
  type DownstreamSink,
  deliver,
  openaiChat,
  webSink,
} from '../../src/index.js'
import { fastifySink, nodeSink } from '../../src/node.js'

const bound = 800
const look = bound / 4
const frame = `data: {"choices":[{"index":0,"delta":{"content":"${'x'.repeat(32 * 1024)}"},"finish_reason":null}]}\n\n`

/** An upstream that never ends: a 32 KiB frame whenever the pump asks. */
function endless(): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(frame)
  return new ReadableStream(
    { pull: (controller) => controller.enqueue(bytes) },
    { highWaterMark: 0 },
  )
}

interface Watched {
  readonly outcome: DeliverOutcome
  readonly cutAt: number
  /** When the sink's count last moved, as sampled. */
  readonly lastByte: number
}

/** Delivers an endless answer through `sink`, sampling its count until the pump ends. */
async function watch(sink: DownstreamSink): Promise<Watched> {
  let last = -1
  let lastByte = performance.now()
  const sampler = setInterval(() => {
    const taken = sink.bytesTaken?.() ?? -1
    if (taken !== last) {
      last = taken
      lastByte = performance.now()
    }
  }, 5)
  const gate = createCommitGate(sink, {
    keepAliveIntervalMs: Number.POSITIVE_INFINITY,
    writeStallTimeoutMs: bound,
  })
  const outcome = await deliver({
    gate,
    body: endless(),
    adapter: openaiChat,
    idleTimeoutMs: 60_000,
    writeStallTimeoutMs: bound,
  })
  const cutAt = performance.now()
  clearInterval(sampler)
  return { outcome, cutAt, lastByte }
}

const servers: Server[] = []
const sockets: Socket[] = []
const closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy()
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
  for (const close of closers.splice(0)) await close()
})

/**
 * A client over a raw socket that reads at about 2 MB/s for `readMs` after its first byte,
 * then stops reading for good (the socket stays open).
 */
function stoppingClient(port: number, path: string, readMs: number): void {
  const socket = connect(port, '127.0.0.1', () => {
    socket.write(`POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\n\r\n`)
  })
  sockets.push(socket)
  let first: number | undefined
  socket.on('data', (data: Buffer) => {
    first ??= performance.now()
    socket.pause()
    if (performance.now() - first > readMs) return
    setTimeout(() => socket.resume(), data.length / 2_000)
  })
  socket.on('error', () => {})
}

/** Each stack: starts a server whose handler hands its sink to `run`; resolves to its port. */
type Stack = (run: (sink: DownstreamSink) => void) => Promise<number>

const nodeHttp: Stack = async (run) => {
  const server = createServer((_req, res) => run(nodeSink(res)))
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return (server.address() as AddressInfo).port
}

const fastify: Stack = async (run) => {
  const app = Fastify()
  app.post('/v1/chat/completions', async (_request, reply) => {
    run(fastifySink(reply))
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  closers.push(() => app.close())
  return (app.server.address() as AddressInfo).port
}

const expressStack: Stack = async (run) => {
  const app = express()
  app.post('/v1/chat/completions', (_req, res) => run(nodeSink(res as unknown as ServerResponse)))
  const server = createServer(app)
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return (server.address() as AddressInfo).port
}

function expectCutOnTime({ outcome, cutAt, lastByte }: Watched): void {
  expect(outcome.kind).toBe('committed')
  if (outcome.kind !== 'committed') return
  expect(outcome.pump.end.kind).toBe('downstream-stalled')
  const late = cutAt - lastByte
  // Sampled every 5 ms; the pump's end reaches the test a few ms after the cut.
  expect(late).toBeGreaterThanOrEqual(bound - 10)
  expect(late).toBeLessThanOrEqual(bound + look + 200)
}

describe('a client that stops reading is cut within writeStallTimeoutMs (plus one look) of its last byte', () => {
  it.each([
    ['nodeSink on node:http', nodeHttp],
    ['fastifySink on Fastify', fastify],
    ["nodeSink on Express's res", expressStack],
  ] as const)('%s', async (_name, stack) => {
    let watched!: Promise<Watched>
    const port = await stack((sink) => {
      watched = watch(sink)
    })
    stoppingClient(port, '/v1/chat/completions', 300)
    for (let i = 0; i < 200 && watched === undefined; i++)
      await new Promise((resolve) => setTimeout(resolve, 10))
    expectCutOnTime(await watched)
  })

  it('webSink, its consumer reading steadily and then stopping', async () => {
    const { sink, response } = webSink()
    const watched = watch(sink)
    const reader = ((await response).body as ReadableStream<Uint8Array>).getReader()
    const started = performance.now()
    while (performance.now() - started < 300) {
      await reader.read()
      await new Promise((resolve) => setTimeout(resolve, 15))
    }
    expectCutOnTime(await watched)
    await reader.cancel().catch(() => {})
  })
})
