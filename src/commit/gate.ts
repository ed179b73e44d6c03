/**
 * The commit gate: the only way to write downstream. It owns the state machine
 * `open → headers-committed → content-committed → closed`, so nothing can reach the client
 * while a retry is still possible, and no retry can start once content has.
 *
 * @module
 */

import { DownstreamClosedError, HeadersSentError, RetryAfterCommitError } from '../errors.js'
import { forwardableHeaders } from './headers.js'

/**
 * The seam between the library and a host's response object (Node `ServerResponse`, a Web
 * `Response` under construction, a test double). See `webSink()` and `nodeSink()`.
 */
export interface DownstreamSink {
  /** Sends the status line and headers. */
  sendHead(status: number, headers: Headers): void | Promise<void>
  /** Writes bytes; the returned promise settles when the sink can take more (backpressure). */
  write(chunk: Uint8Array): void | Promise<void>
  /** Pushes buffered bytes out, if the sink buffers (compression middleware, say). */
  flush?(): void | Promise<void>
  /** Ends the response normally. */
  close(): void | Promise<void>
  /** Ends the response abnormally (resets the connection, errors the body stream). */
  abort(reason?: unknown): void
  /** Aborts when the client goes away. */
  readonly signal: AbortSignal
}

/** Where a gate stands. Only ever moves forward. */
export type GateState = 'open' | 'headers-committed' | 'content-committed' | 'closed'

/** Options of {@link createCommitGate}. */
export interface CommitGateOptions {
  /**
   * The status sent when the stream commits.
   * @default 200
   */
  status?: number
  /**
   * Headers added to the SSE defaults (`content-type: text/event-stream; charset=utf-8`,
   * `cache-control: no-cache, no-transform`, `x-accel-buffering: no`); these win over the defaults.
   * @example { headers: { 'x-request-id': id } }
   */
  headers?: HeadersInit
  /**
   * Send headers as soon as an upstream stream is validated, before any output; failures
   * before content are then written in-band. Read by callers such as `relay()`.
   * @default false
   */
  earlyHeaders?: boolean
  /**
   * After headers are committed, write an SSE comment when nothing was written for this long,
   * so idle proxies and clients keep the connection. It never counts as content. `0` disables.
   * @default 15_000
   */
  keepAliveIntervalMs?: number
}

/** Defaults of {@link CommitGateOptions}. */
export const commitGateDefaults = Object.freeze({
  status: 200,
  earlyHeaders: false,
  keepAliveIntervalMs: 15_000,
})

/** SSE response headers the gate always sends (a host may override them). */
const sseHeaders: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
})

const keepAliveBytes = new TextEncoder().encode(': keep-alive\n\n')
const done: Promise<void> = Promise.resolve()

/** The downstream side of one request. Create one per request, over its sink. */
export interface CommitGate {
  /** Where the gate stands. */
  readonly state: GateState
  /** True until content is committed (and while the downstream is still there). */
  readonly canRetry: boolean
  /** Whether callers should commit headers before the first output. */
  readonly earlyHeaders: boolean
  /** Aborts with a {@link DownstreamClosedError} when the client goes away or a write fails. */
  readonly signal: AbortSignal
  /** The downstream failure, once there was one. */
  readonly failure: DownstreamClosedError | undefined
  /** Content bytes written (keep-alives not counted). */
  readonly bytesWritten: number
  /**
   * Sets the upstream's headers to pass on with the head (replacing those of an earlier
   * attempt). Ignored once headers were sent; the gate's own and the host's headers win.
   */
  setUpstreamHeaders(headers: Headers): void
  /** Sends the SSE head if it was not sent. */
  commitHeaders(): Promise<void>
  /** Writes content bytes, committing headers and content first. Waits for backpressure. */
  write(bytes: Uint8Array): Promise<void>
  /**
   * Answers with a real status and body instead of a stream (a failure before anything was
   * sent). Throws {@link HeadersSentError} once headers were sent.
   */
  respond(status: number, body: string, headers?: HeadersInit): Promise<void>
  /** Throws {@link RetryAfterCommitError} when content was committed: call before each new attempt. */
  assertCanRetry(): void
  /** Ends the response normally (sending the head first if nothing was sent). */
  close(): Promise<void>
  /** Ends the response abnormally. */
  abort(reason?: unknown): void
}

function normalize(options: CommitGateOptions) {
  const status = options.status ?? commitGateDefaults.status
  if (!Number.isInteger(status) || status < 200 || status > 599) {
    throw new RangeError(`status must be an HTTP status from 200 to 599, got ${String(status)}`)
  }
  const keepAliveIntervalMs = options.keepAliveIntervalMs ?? commitGateDefaults.keepAliveIntervalMs
  if (!Number.isFinite(keepAliveIntervalMs) || keepAliveIntervalMs < 0) {
    throw new RangeError(
      `keepAliveIntervalMs must be 0 or a positive number, got ${String(keepAliveIntervalMs)}`,
    )
  }
  return {
    status,
    keepAliveIntervalMs,
    earlyHeaders: options.earlyHeaders ?? commitGateDefaults.earlyHeaders,
  }
}

class Gate implements CommitGate {
  readonly #sink: DownstreamSink
  readonly #status: number
  /** The host's headers; the head is built only when it is sent (idle streams hold no Headers). */
  readonly #hostHeaders: HeadersInit | undefined
  #upstreamHeaders: Headers | undefined
  readonly #keepAliveMs: number
  readonly earlyHeaders: boolean
  readonly #controller = new AbortController()
  #state: GateState = 'open'
  #failure: DownstreamClosedError | undefined
  #bytes = 0
  /** Writes run one after another: a keep-alive never lands inside a frame. */
  #tail: Promise<void> = Promise.resolve()
  #pending = 0
  #lastWrite = 0
  #timer: ReturnType<typeof setInterval> | undefined
  readonly #onClientGone = () =>
    this.#fail(new DownstreamClosedError('client-gone', this.#sink.signal.reason))

  constructor(sink: DownstreamSink, options: CommitGateOptions) {
    const { status, keepAliveIntervalMs, earlyHeaders } = normalize(options)
    this.#sink = sink
    this.#status = status
    this.#keepAliveMs = keepAliveIntervalMs
    this.earlyHeaders = earlyHeaders
    this.#hostHeaders = options.headers
    if (sink.signal.aborted) this.#onClientGone()
    else sink.signal.addEventListener('abort', this.#onClientGone, { once: true })
  }

  get state(): GateState {
    return this.#state
  }

  get canRetry(): boolean {
    return this.#state === 'open' || this.#state === 'headers-committed'
  }

  get signal(): AbortSignal {
    return this.#controller.signal
  }

  get failure(): DownstreamClosedError | undefined {
    return this.#failure
  }

  get bytesWritten(): number {
    return this.#bytes
  }

  #fail(error: DownstreamClosedError): void {
    if (this.#failure !== undefined) return
    this.#failure = error
    this.#state = 'closed'
    this.#stopKeepAlive()
    this.#sink.signal.removeEventListener('abort', this.#onClientGone)
    this.#controller.abort(error)
    try {
      this.#sink.abort(error)
    } catch {
      // The sink is gone already; nothing more to release.
    }
  }

  #ensureUsable(): void {
    if (this.#failure !== undefined) throw this.#failure
    if (this.#state === 'closed')
      throw new DownstreamClosedError('write-failed', new Error('the response was already closed'))
  }

  /** Runs one sink operation after the previous ones; a failure closes the gate. */
  #run(operation: () => void | Promise<void>): Promise<void> {
    this.#pending++
    const step = this.#tail.then(async () => {
      if (this.#failure !== undefined) throw this.#failure
      try {
        await operation()
      } catch (error) {
        this.#fail(new DownstreamClosedError('write-failed', error))
        throw this.#failure
      } finally {
        this.#pending--
        this.#lastWrite = performance.now()
      }
    })
    this.#tail = step.catch(() => {})
    return step
  }

  setUpstreamHeaders(headers: Headers): void {
    if (this.#state === 'open') this.#upstreamHeaders = forwardableHeaders(headers)
  }

  async commitHeaders(): Promise<void> {
    this.#ensureUsable()
    if (this.#state !== 'open') return
    this.#state = 'headers-committed'
    await this.#run(async () => {
      const head = new Headers(this.#upstreamHeaders)
      for (const [name, value] of Object.entries(sseHeaders)) head.set(name, value)
      for (const [name, value] of new Headers(this.#hostHeaders)) head.set(name, value)
      await this.#sink.sendHead(this.#status, head)
      await this.#sink.flush?.()
    })
    this.#startKeepAlive()
  }

  write(bytes: Uint8Array): Promise<void> {
    // Hot path: nothing queued and content already committed: write straight through, and
    // allocate no promise chain when the sink takes the bytes synchronously.
    if (this.#state === 'content-committed' && this.#pending === 0 && this.#failure === undefined) {
      this.#bytes += bytes.length
      let written: void | Promise<void>
      try {
        written = this.#sink.write(bytes)
      } catch (error) {
        this.#fail(new DownstreamClosedError('write-failed', error))
        return Promise.reject(this.#failure)
      }
      if (written === undefined) {
        this.#lastWrite = performance.now()
        return done
      }
      return this.#track(written)
    }
    return this.#writeQueued(bytes)
  }

  /** Follows a sink write that did not complete at once, as the queue's tail. */
  #track(written: Promise<void>): Promise<void> {
    this.#pending++
    const step = written.then(
      () => {
        this.#pending--
        this.#lastWrite = performance.now()
      },
      (error: unknown) => {
        this.#pending--
        this.#fail(new DownstreamClosedError('write-failed', error))
        throw this.#failure
      },
    )
    this.#tail = step.catch(() => {})
    return step
  }

  async #writeQueued(bytes: Uint8Array): Promise<void> {
    this.#ensureUsable()
    // Queue the head and the bytes in this same tick, so unawaited writes keep their order.
    const head = this.#state === 'open' ? this.commitHeaders() : undefined
    this.#state = 'content-committed'
    this.#bytes += bytes.length
    await Promise.all([head, this.#run(() => this.#sink.write(bytes))])
  }

  async respond(status: number, body: string, headers?: HeadersInit): Promise<void> {
    this.#ensureUsable()
    if (this.#state !== 'open') throw new HeadersSentError()
    this.#state = 'closed'
    const head = new Headers({ 'content-type': 'application/json', 'cache-control': 'no-store' })
    for (const [name, value] of new Headers(headers)) head.set(name, value)
    await this.#run(async () => {
      await this.#sink.sendHead(status, head)
      if (body !== '') await this.#sink.write(new TextEncoder().encode(body))
      await this.#sink.close()
    })
    this.#release()
  }

  assertCanRetry(): void {
    if (this.#state === 'content-committed') throw new RetryAfterCommitError()
    if (this.#failure !== undefined) throw this.#failure
  }

  async close(): Promise<void> {
    if (this.#failure !== undefined || this.#state === 'closed') return
    const head = this.#state === 'open' ? this.commitHeaders() : undefined
    this.#state = 'closed'
    this.#stopKeepAlive()
    await Promise.all([head, this.#run(() => this.#sink.close())]).catch(() => {})
    this.#release()
  }

  abort(reason?: unknown): void {
    if (this.#state === 'closed') return
    this.#state = 'closed'
    this.#stopKeepAlive()
    this.#release()
    try {
      this.#sink.abort(reason)
    } catch {
      // Already gone.
    }
  }

  #release(): void {
    this.#sink.signal.removeEventListener('abort', this.#onClientGone)
  }

  #startKeepAlive(): void {
    if (this.#keepAliveMs === 0 || this.#timer !== undefined || this.#state === 'closed') return
    this.#timer = setInterval(() => {
      if (this.#state === 'closed' || this.#pending > 0) return
      if (performance.now() - this.#lastWrite < this.#keepAliveMs) return
      this.#run(() => this.#sink.write(keepAliveBytes)).catch(() => {})
    }, this.#keepAliveMs)
    ;(this.#timer as { unref?: () => void }).unref?.()
  }

  #stopKeepAlive(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
  }
}

/**
 * Creates the commit gate of one request over its downstream sink.
 *
 * @example
 * const gate = createCommitGate(sink, { keepAliveIntervalMs: 10_000 })
 * gate.canRetry // true: nothing the client can see was sent
 * await gate.write(frame.raw) // commits headers and content
 * gate.assertCanRetry() // throws RetryAfterCommitError
 */
export function createCommitGate(
  sink: DownstreamSink,
  options: CommitGateOptions = {},
): CommitGate {
  return new Gate(sink, options)
}
