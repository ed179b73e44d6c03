/**
 * `iterableResponse` and `nodeResponse`: a `Response` whose body the relay reads as the
 * async iterable (a Node stream) it is, while everything else a `Response` offers still works;
 * over a real `http.Server` on 127.0.0.1 for `nodeResponse`.
 */
import { createServer, request, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { createFrameReader, createMemoryKeyPool, openaiChat, relay } from '../../src/index.js'
import { iterableResponse, nodeResponse } from '../../src/node.js'
import { frameSourceOf } from '../../src/sse/sources.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { utf8 } from '../support/sources.js'

const answer = [
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
  'data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n',
  'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}\n\n',
  'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
]

/** An async iterable over chunks that counts how often it was iterated. */
function chunks(parts: readonly string[]) {
  const source = {
    iterations: 0,
    async *[Symbol.asyncIterator]() {
      source.iterations++
      for (const part of parts) yield utf8(part)
    },
  }
  return source
}

describe('iterableResponse', () => {
  it('is a real Response whose iterable body is what a frame reader reads', async () => {
    const body = chunks(answer)
    const response = iterableResponse(body, {
      status: 200,
      headers: { 'content-type': 'text/event-stream' },
    })
    expect(response).toBeInstanceOf(Response)
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toBe('text/event-stream')
    expect(frameSourceOf(response)).toBe(body)
    expect(frameSourceOf(new Response('x'))).toBeInstanceOf(ReadableStream)
  })

  it('relay() reads the iterable itself and relays its exact bytes', async () => {
    const body = chunks(answer)
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-a' }]),
      adapter: openaiChat,
      attempt: async () =>
        iterableResponse(body, { headers: { 'content-type': 'text/event-stream' } }),
    })
    expect(outcome).toMatchObject({ kind: 'committed', end: { kind: 'completed' } })
    expect(sink.text).toBe(answer.join(''))
    expect(body.iterations).toBe(1)
  })

  it('text(), json(), arrayBuffer() and body read the iterable through a web stream', async () => {
    expect(await iterableResponse(chunks(['ab', 'c'])).text()).toBe('abc')
    expect(await iterableResponse(chunks(['{"a"', ':1}'])).json()).toEqual({ a: 1 })
    const bytes = new Uint8Array(await iterableResponse(chunks(['xy'])).arrayBuffer())
    expect([...bytes]).toEqual([120, 121])
    const response = iterableResponse(chunks(['data: a\n\n']))
    expect(response.body).toBe(response.body)
    const reader = (response.body as ReadableStream<Uint8Array>).getReader()
    expect((await reader.read()).value).toEqual(utf8('data: a\n\n'))
    expect((await reader.read()).done).toBe(true)
  })
})

describe('nodeResponse over node:http', () => {
  let server: Server | undefined
  afterEach(async () => {
    server?.closeAllConnections()
    await new Promise<void>((resolve) =>
      server === undefined ? resolve() : server.close(() => resolve()),
    )
    server = undefined
  })

  async function serve(handler: (res: ServerResponse) => void): Promise<string> {
    server = createServer((req, res) => {
      req.resume()
      handler(res)
    })
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve))
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  }

  function get(url: string) {
    return new Promise<{ res: import('node:http').IncomingMessage; response: Response }>(
      (resolve, reject) => {
        const req = request(url, (res) => resolve({ res, response: nodeResponse(res) }))
        req.once('error', reject)
        req.end()
      },
    )
  }

  it('keeps status, status text and every header, repeated ones included', async () => {
    const url = await serve((res) => {
      res.writeHead(429, 'Slow Down', [
        ['retry-after', '3'],
        ['set-cookie', 'a=1'],
        ['set-cookie', 'b=2'],
      ])
      res.end('{"error":{"message":"busy"}}')
    })
    const { response } = await get(url)
    expect(response.status).toBe(429)
    expect(response.statusText).toBe('Slow Down')
    expect(response.headers.get('retry-after')).toBe('3')
    expect(response.headers.getSetCookie()).toEqual(['a=1', 'b=2'])
    expect(await response.json()).toEqual({ error: { message: 'busy' } })
  })

  it('relays a stream read as the Node stream it is', async () => {
    const url = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      for (const part of answer) res.write(part)
      res.end()
    })
    const { res, response } = await get(url)
    expect(frameSourceOf(response)).not.toBeInstanceOf(ReadableStream)
    const reader = createFrameReader(frameSourceOf(response) as AsyncIterable<Uint8Array>)
    let relayed = ''
    for (let frame = await reader.next(); frame !== null; frame = await reader.next())
      relayed += new TextDecoder().decode(frame.raw)
    expect(relayed).toBe(answer.join(''))
    expect(res.complete).toBe(true)
  })

  it('a cancel releases an upstream that sent headers and hangs, without waiting on its read', async () => {
    let upstream: ServerResponse | undefined
    const url = await serve((res) => {
      upstream = res
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(': hello\n\n')
    })
    const { res, response } = await get(url)
    const reader = createFrameReader(frameSourceOf(response) as AsyncIterable<Uint8Array>)
    expect((await reader.next())?.comments).toEqual(['hello'])
    const pending = reader.next().catch((error: unknown) => error)
    await reader.cancel(new Error('peek gave up'))
    expect(res.destroyed).toBe(true)
    await pending
    await new Promise<void>((resolve) =>
      upstream?.closed ? resolve() : upstream?.once('close', () => resolve()),
    )
    expect(upstream?.closed).toBe(true)
  })

  it('a connection cut before the end fails the read after the frames that came: never a clean end', async () => {
    const url = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`${answer[0]}${answer[1]}`, () => setTimeout(() => res.socket?.destroy(), 20))
    })
    const { response } = await get(url)
    const reader = createFrameReader(frameSourceOf(response) as AsyncIterable<Uint8Array>)
    const text = async () => new TextDecoder().decode((await reader.next())?.raw)
    expect(await text()).toBe(answer[0])
    expect(await text()).toBe(answer[1])
    await expect(reader.next()).rejects.toMatchObject({ name: 'UpstreamReadError' })
  })

  it('relay() over a cut Node stream ends partial, with the frames before the cut and no success', async () => {
    const url = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`${answer[0]}${answer[1]}`, () => setTimeout(() => res.socket?.destroy(), 20))
    })
    const sink = createRecordingSink()
    const outcome = await relay({
      sink,
      pool: createMemoryKeyPool([{ id: 'k', secret: 'sk-not-real-1234' }]),
      adapter: openaiChat,
      policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
      attempt: async () => (await get(url)).response,
    })
    expect(outcome.kind).toBe('committed')
    if (outcome.kind !== 'committed') return
    expect(outcome.end.kind).not.toBe('completed')
    expect(sink.text.startsWith(`${answer[0]}${answer[1]}`)).toBe(true)
  })

  it('answers a null-body status with a body-less Response', async () => {
    const url = await serve((res) => {
      res.writeHead(204)
      res.end()
    })
    const { response } = await get(url)
    expect(response.status).toBe(204)
    expect(response.body).toBeNull()
  })
})
