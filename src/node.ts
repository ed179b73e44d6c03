/**
 * `stream-boundary/node`: a downstream sink over Node's `http.ServerResponse` (plain
 * `node:http`, Express; `fastifySink` for a Fastify `reply`), the ready attempt over `node:http`
 * (`nodeHttpAttempt`), a safe reader of a client's request (`readNodeRequest`), and
 * `serveFetch` to serve a fetch-style
 * handler on Node, and `iterableResponse`, a `Response` over a Node stream (or any async
 * iterable) that the frame reader reads with no web stream in between. The only `node:http`
 * code in the package.
 *
 * @module stream-boundary/node
 */

import { Buffer } from 'node:buffer'
import {
  createServer,
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import type { AddressInfo } from 'node:net'
import { urlToHttpOptions } from 'node:url'
import type { DownstreamSink } from './commit/gate-options.js'
import { type PlainHeadSink, plainHead } from './commit/head.js'
import { RequestNotSentError } from './errors.js'
import {
  type AttemptRequestContext,
  attemptRequest,
  checkReadyAttemptOptions,
  type NotSentError,
  type ReadyAttempt,
  type ReadyAttemptOptions,
} from './retry/request/ready-attempt.js'
import { PlainHeaders, PlainResponse } from './sse/plain-response.js'
import { iterableResponse } from './sse/sources.js'
import { ownStop, Stop } from './stop.js'

export { type ReadNodeRequestOptions, readNodeRequest } from './node/read-request.js'
export { iterableResponse }

/** Where the frame reader finds a body's Node stream and its release (`src/sse/reader.ts`). */
const nodeReadable = Symbol.for('stream-boundary.nodeReadable')

/**
 * Wraps an `http.ServerResponse` as a {@link DownstreamSink}: `writeHead` + `flushHeaders`,
 * `write` honouring `drain`, `end`, `destroy`, and the response's `close` before it finished
 * as the client-gone signal.
 *
 * @example
 * http.createServer(async (req, res) => {
 *   await relay({ sink: nodeSink(res), attempt, pool, adapter: openaiChat })
 * })
 *
 * @group Downstream
 */
export function nodeSink(res: ServerResponse): DownstreamSink {
  // The client-gone abort; `sink.signal` is made from it only when the host asks.
  const gone = new Stop()
  const onClose = () => {
    if (!res.writableFinished) gone.abort(new Error('the client closed the connection'))
  }
  // A client that left before the sink was made (while the host read the body or worked)
  // is gone already: its 'close' event has passed.
  if ((res.destroyed || res.closed) && !res.writableFinished) onClose()
  else res.once('close', onClose)

  function waitFor(event: 'drain' | 'finish'): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const done = (error?: unknown) => {
        res.off(event, onEvent)
        res.off('close', onGone)
        res.off('error', onError)
        if (error === undefined) resolve()
        else reject(error)
      }
      const onEvent = () => done()
      const onGone = () =>
        done(
          event === 'finish' && res.writableFinished
            ? undefined
            : new Error('the client closed the connection'),
        )
      const onError = (error: Error) => done(error)
      res.once(event, onEvent)
      res.once('close', onGone)
      res.once('error', onError)
    })
  }

  let given = 0
  // When a write's bytes were all taken by the kernel, and the count then (the client's
  // progress, timed when it happened: see `bytesTakenAt`).
  let stampAt: number | undefined
  let stampTaken = 0
  const stamp = () => {
    stampAt = performance.now()
    stampTaken = bytesTakenOf(res, given)
  }
  const sink: DownstreamSink & PlainHeadSink & { readonly [ownStop]: Stop } = {
    get signal() {
      return gone.real
    },
    [ownStop]: gone,
    sendHead(status, headers) {
      const plain: Record<string, string> = {}
      for (const [name, value] of headers) plain[name] = value
      res.writeHead(status, plain)
    },
    // The gate's head as the record it builds: no `Headers` per response.
    [plainHead](status, headers) {
      // Sent with the first bytes, or on its own by flush() (early headers).
      res.writeHead(status, headers)
    },
    write(chunk) {
      if (res.destroyed || res.writableEnded)
        return Promise.reject(new Error('the response is closed'))
      given += chunk.length
      if (res.write(chunk, stamp)) return
      return waitFor('drain')
    },
    bytesTaken: () => bytesTakenOf(res, given),
    bytesTakenAt: () => (bytesTakenOf(res, given) === stampTaken ? stampAt : undefined),
    flush() {
      // The head alone (early headers); then compression middleware's own flush(), if any.
      if (!res.destroyed && !res.writableEnded) res.flushHeaders()
      const compressed = res as ServerResponse & { flush?: () => void }
      compressed.flush?.()
    },
    close() {
      if (res.writableEnded) return
      // Destroyed before its end: no `finish` (nor `close`) is still to come.
      if (res.destroyed) return Promise.reject(new Error('the response is closed'))
      const finished = waitFor('finish')
      res.end()
      return finished
    },
    abort(reason) {
      res.off('close', onClose)
      if (!res.destroyed) res.destroy(reason instanceof Error ? reason : undefined)
    },
  }
  return sink
}

/** The parts of a socket's state that tell how far a write in flight has gone. */
type SocketProgress = { _bytesDispatched?: unknown; _handle?: { writeQueueSize?: unknown } | null }

/**
 * How many bytes of the response's socket the kernel took (what the client read made room
 * for). A write in flight shows its progress only in libuv's queue: the response's own
 * `writableLength` holds the whole of it until it is all out. Framing and head bytes count
 * too: only the growth is read. Without those counts, what left the response's buffers.
 */
function bytesTakenOf(res: ServerResponse, given: number): number {
  const socket = res.socket as SocketProgress | null
  const dispatched = socket?._bytesDispatched
  const queued = socket?._handle?.writeQueueSize
  if (typeof dispatched === 'number' && typeof queued === 'number') return dispatched - queued
  return given - res.writableLength
}

/**
 * What {@link fastifySink} uses of a Fastify `reply`: its Node response, `hijack()` and the
 * headers set on it. Any object of this shape works; Fastify itself is not imported.
 *
 * @group Downstream
 */
export interface FastifyReplyLike {
  /** The Node response the relay writes. */
  readonly raw: ServerResponse
  /** Tells Fastify the handler answers the request itself. */
  hijack(): unknown
  /** The headers set on the reply so far (by plugins, hooks or the handler). */
  getHeaders(): Record<string, number | string | readonly string[] | undefined>
}

/**
 * A {@link DownstreamSink} for a Fastify route: hijacks the `reply` (Fastify then sends
 * nothing of its own for the request: no serializer, no `onSend` hooks, no error handler
 * writing after the relay) and carries the headers plugins set on the `reply` so far (CORS,
 * security headers, a request id) into the relayed head. Make it in the handler, after the
 * plugins' hooks have run; a `400`/`413` that `readNodeRequest` writes on `reply.raw`
 * afterwards carries them too. The relay's own headers win over a plugin's of the same name.
 *
 * @example
 * app.post('/v1/chat/completions', async (request, reply) => {
 *   const sink = fastifySink(reply)
 *   const body = await readNodeRequest(request.raw, reply.raw, { adapter: openaiChat })
 *   if (body === undefined) return // answered 400/413 already
 *   await relay({ sink, pool, adapter: openaiChat, request: { url, body }, attempt: nodeHttpAttempt() })
 * })
 *
 * @group Downstream
 */
export function fastifySink(reply: FastifyReplyLike): DownstreamSink {
  reply.hijack()
  const res = reply.raw
  if (!res.headersSent) {
    // Node merges headers set on the response into every writeHead(), its own arguments winning.
    for (const [name, value] of Object.entries(reply.getHeaders())) {
      if (value !== undefined && !res.hasHeader(name))
        res.setHeader(name, typeof value === 'object' ? [...value] : value)
    }
  }
  return nodeSink(res)
}

/** Statuses whose `Response` cannot have a body. */
const nullBodyStatuses = new Set([101, 204, 205, 304])

/**
 * Turns the `http.IncomingMessage` of an upstream request made with `node:http` / `node:https`
 * into a `Response` an attempt function can return. The relay then reads the stream as the
 * Node stream it is, with no web stream in between, which is what makes a `node:http`
 * gateway cheaper than one whose attempts use `fetch` (see docs/performance.md). The
 * `Response` is a light one: its headers are read from the message's raw pairs into a plain
 * record, and no undici state is made for it; it passes `instanceof Response`, its `headers`
 * `instanceof Headers`, and both read as the `fetch` ones do (a web stream is made for `body`
 * only when something asks for it).
 *
 * @example
 * attempt: ({ key, signal }) =>
 *   new Promise((resolve, reject) => {
 *     const req = https.request(url, { method: 'POST', headers: { authorization: `Bearer ${key.secret}` }, signal }, (res) =>
 *       resolve(nodeResponse(res)),
 *     )
 *     req.once('error', reject)
 *     req.end(body)
 *   })
 *
 * @group Relay
 */
export function nodeResponse(res: IncomingMessage): Response {
  const status = res.statusCode ?? 502
  const empty = nullBodyStatuses.has(status)
  const response = new PlainResponse(
    status,
    res.statusMessage ?? '',
    new PlainHeaders(res.rawHeaders),
    empty ? null : bodyOf(res),
  )
  if (empty) res.resume()
  return response
}

/**
 * Lets an upstream response go. One that already arrived whole (an error frame, then the end)
 * is read out instead of destroyed, so its keep-alive connection goes back to the agent
 * rather than being closed and opened again for the next attempt; any other is destroyed.
 */
function release(res: IncomingMessage): void {
  if (res.complete && !res.destroyed) res.resume()
  else res.destroy()
}

/**
 * The response's chunks, released at once on `return()`: a Node stream's own iterator waits
 * for a pending read to finish first, which an upstream that hangs never does. The frame
 * reader takes the Node stream itself instead (chunks from `read()`, no promise each).
 */
function bodyOf(res: IncomingMessage): AsyncIterable<Uint8Array> {
  return {
    [nodeReadable]: { stream: res, release: () => release(res) },
    [Symbol.asyncIterator]() {
      const chunks = res[Symbol.asyncIterator]() as AsyncIterator<Uint8Array>
      return {
        next: () => chunks.next(),
        return: async () => {
          release(res)
          return { done: true, value: undefined }
        },
      }
    },
  } as AsyncIterable<Uint8Array>
}

/**
 * A running {@link serveFetch} server.
 *
 * @group Serving
 */
export interface ServedFetch {
  /** The base URL, `http://127.0.0.1:<port>`. */
  readonly url: string
  readonly port: number
  /** Stops accepting, ends every open connection, and resolves when closed. */
  close(): Promise<void>
}

/**
 * Options of {@link serveFetch}.
 *
 * @group Serving
 */
export interface ServeFetchOptions {
  /** @default 0 (an ephemeral port) */
  readonly port?: number
  /** @default '127.0.0.1' */
  readonly host?: string
}

/**
 * Serves a fetch-style handler (`Request → Response`) over Node's `http`: the request's
 * signal aborts when the client goes away, the response body is written with backpressure,
 * and a body that fails mid-way cuts the connection (as a dropped proxy tunnel would), so
 * clients see a reset rather than a clean end.
 *
 * @example
 * const { url, close } = await serveFetch((request) => new Response('ok'))
 *
 * @group Serving
 */
export async function serveFetch(
  handler: (request: Request) => Response | Promise<Response>,
  options: ServeFetchOptions = {},
): Promise<ServedFetch> {
  const host = options.host ?? '127.0.0.1'
  const server: Server = createServer((req, res) => {
    respond(handler, host, req, res).catch(() => res.destroy())
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://${host}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

async function respond(
  handler: (request: Request) => Response | Promise<Response>,
  host: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const gone = new AbortController()
  res.once('close', () => {
    if (!res.writableFinished) gone.abort(new Error('the client closed the connection'))
  })
  const headers = new Headers()
  for (const [name, value] of Object.entries(req.headers)) {
    if (typeof value === 'string') headers.set(name, value)
    else if (Array.isArray(value)) for (const item of value) headers.append(name, item)
  }
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD'
  let body: Buffer | undefined
  let response: Response
  try {
    if (hasBody) {
      const chunks: Uint8Array[] = []
      for await (const chunk of req) chunks.push(chunk as Uint8Array)
      body = Buffer.concat(chunks)
    }
    const request = new Request(`http://${req.headers.host ?? host}${req.url ?? '/'}`, {
      method: req.method ?? 'GET',
      headers,
      signal: gone.signal,
      ...(body === undefined
        ? {}
        : { body: new Uint8Array(body.buffer, body.byteOffset, body.byteLength) as BodyInit }),
    })
    response = await handler(request)
  } catch {
    if (!res.headersSent && !res.destroyed) res.writeHead(500).end()
    else res.destroy()
    return
  }
  const head: Record<string, string> = {}
  for (const [name, value] of response.headers) head[name] = value
  // `connection: close` without a length: the body ends where the connection does (not chunked).
  if (head.connection?.toLowerCase() === 'close' && head['content-length'] === undefined) {
    res.useChunkedEncodingByDefault = false
  }
  res.writeHead(response.status, head)
  res.flushHeaders()
  if (response.body === null) {
    res.end()
    return
  }
  const reader = response.body.getReader()
  const cancel = () => {
    reader.cancel(gone.signal.reason).catch(() => {})
  }
  gone.signal.addEventListener('abort', cancel, { once: true })
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      if (!res.write(value)) {
        await new Promise<void>((resolve) => {
          const go = () => {
            res.off('drain', go)
            res.off('close', go)
            resolve()
          }
          res.once('drain', go)
          res.once('close', go)
        })
      }
      if (res.destroyed) return
    }
    res.end()
  } catch {
    // The body failed mid-way: cut the connection instead of ending it cleanly, once what was
    // written before the failure has gone out.
    await new Promise((resolve) => setImmediate(resolve))
    res.destroy()
  } finally {
    gone.signal.removeEventListener('abort', cancel)
  }
}

/**
 * A signal that aborts when the client left before the response finished: `res` closed while
 * not `writableFinished` (or `req` was aborted). Hand it to `relay({ signal })` when the sink
 * is not `nodeSink(res)` (which already watches the client), for instance under
 * `@hono/node-server`, whose `c.env.incoming` / `c.env.outgoing` are these two objects.
 *
 * @example
 * app.post('/v1/messages', (c) => {
 *   const signal = clientSignal(c.env.incoming, c.env.outgoing)
 *   // relay({ sink, signal, ... })
 * })
 *
 * @group Downstream
 */
export function clientSignal(req: IncomingMessage, res: ServerResponse): AbortSignal {
  const controller = new AbortController()
  const gone = () => {
    if (!res.writableFinished) controller.abort(new Error('The client closed the connection'))
    res.off('close', gone)
    req.off('aborted', gone)
  }
  if (res.destroyed && !res.writableFinished) gone()
  else {
    res.on('close', gone)
    req.on('aborted', gone)
  }
  return controller.signal
}

/**
 * Keep-alive agents that reuse the most recently freed connection first (as undici's pool
 * does), one per scheme, shared by every {@link nodeHttpAttempt} without its own. No cap on
 * connections: an attempt waiting for a socket would wait inside its first-byte clock. Idle
 * sockets do not hold the process (Node unrefs a free keep-alive socket).
 */
let sharedAgents: { readonly http: HttpAgent; readonly https: HttpsAgent } | undefined

function agentsOf(): { readonly http: HttpAgent; readonly https: HttpsAgent } {
  sharedAgents ??= {
    http: new HttpAgent({ keepAlive: true, scheduling: 'lifo' }),
    https: new HttpsAgent({ keepAlive: true, scheduling: 'lifo' }),
  }
  return sharedAgents
}

/** Node's request options of a URL, kept per URL (at most 64): parsing one costs more than the rest of a request's set-up. */
const urlOptions = new Map<string, ReturnType<typeof urlToHttpOptions>>()

function requestOptionsOf(url: string): ReturnType<typeof urlToHttpOptions> {
  let options = urlOptions.get(url)
  if (options === undefined) {
    options = urlToHttpOptions(new URL(url))
    if (urlOptions.size >= 64) urlOptions.clear()
    urlOptions.set(url, options)
  }
  return options
}

/**
 * Options of {@link nodeHttpAttempt}: those of `fetchAttempt`, and the agents to send with.
 *
 * @group Relay
 */
export interface NodeHttpAttemptOptions extends ReadyAttemptOptions {
  /**
   * The `node:http` / `node:https` agents.
   * @default keep-alive agents shared by every `nodeHttpAttempt`, newest free connection first
   */
  readonly agents?: { readonly http?: HttpAgent; readonly https?: HttpsAgent } | undefined
}

/**
 * The ready attempt over `node:http` / `node:https`: the same request as `fetchAttempt` (this
 * attempt's own `context.request`, the adapter's credential header for the leased key, the
 * protocol's required headers, the allowlisted client headers), over keep-alive agents, with
 * the answer read by the relay as the Node stream it is (`nodeResponse`): the cheapest
 * transport on Node (docs/performance.md). `node:http` never follows a redirect.
 *
 * @example
 * await relay({ sink: nodeSink(res), pool, adapter: openaiChat, request: { url, body }, attempt: nodeHttpAttempt() })
 *
 * @group Relay
 */
export function nodeHttpAttempt(options: NodeHttpAttemptOptions = {}): ReadyAttempt {
  checkReadyAttemptOptions('nodeHttpAttempt', options)
  return (context) => sendOverNode(context, options)
}

/** `nodeHttpAttempt`'s failures before sending, as the named error the relay knows. */
const notSent: NotSentError = (step, message, cause) =>
  new RequestNotSentError(step, message, { cause })

/**
 * What an upstream that switched protocols (`101`) to a plain request is: no HTTP answer.
 * Node's client emits only `upgrade` (or, with no listener, `close`) for it; `fetch` fails it
 * as a socket error. Both are an upstream failure, retried on another key.
 */
function upgradedError(): Error {
  return Object.assign(
    new Error(
      'the upstream answered 101 Switching Protocols to a request that asked for no upgrade',
    ),
    { code: 'ERR_UPSTREAM_UPGRADE' },
  )
}

function sendOverNode(
  context: AttemptRequestContext & { readonly signal: AbortSignal },
  options: NodeHttpAttemptOptions,
): Promise<Response> {
  return new Promise((resolve, reject) => {
    const { url, headers, body } = attemptRequest(context, options, notSent)
    let target: ReturnType<typeof urlToHttpOptions>
    try {
      target = requestOptionsOf(url)
    } catch (error) {
      throw notSent('url', 'the upstream URL cannot be sent with node:http', error)
    }
    const secure = url.startsWith('https:')
    const send = secure ? httpsRequest : httpRequest
    const agent = secure
      ? (options.agents?.https ?? agentsOf().https)
      : (options.agents?.http ?? agentsOf().http)
    headers['content-length'] = String(Buffer.byteLength(body))
    // The signal by hand: `request({ signal })` also hangs an end-of-stream watcher on the
    // request, which costs more than the rest of this function (docs/performance.md).
    const { signal } = context
    let settled = false
    const abort = () => req.destroy(signal.reason)
    const fail = (error: unknown) => {
      signal.removeEventListener('abort', abort)
      settled = true
      reject(error)
    }
    const req = send({ ...target, method: 'POST', headers, agent }, (res) => {
      settled = true
      res.once('close', () => signal.removeEventListener('abort', abort))
      resolve(nodeResponse(res))
    })
    req.on('error', fail)
    req.once('upgrade', (_res: IncomingMessage, socket: { destroy(): void }) => {
      socket.destroy()
      fail(upgradedError())
    })
    // A request that closed with neither an answer nor an error must not leave its attempt waiting.
    req.once('close', () => {
      if (!settled) fail(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }))
    })
    if (signal.aborted) abort()
    else signal.addEventListener('abort', abort, { once: true })
    req.end(body)
  })
}
