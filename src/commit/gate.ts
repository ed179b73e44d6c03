/**
 * The commit gate: the only way to write downstream. It owns the state machine
 * `open → headers-committed → content-committed → closed`, so nothing can reach the client
 * while a retry is still possible, and no retry can start once content has.
 *
 * @module
 */

import {
  DownstreamClosedError,
  HeadersSentError,
  RetryAfterCommitError,
  StreamTimeoutError,
} from '../errors.js'
import { rejectUnknownKeys, timeoutMilliseconds } from '../options.js'
import { ownStop, type SignalLike, Stop, stopOf } from '../stop.js'
import { sendHead, setEach, sseHeaders } from './head.js'
import {
  type ForwardHeadersPolicy,
  filterHeaderRecord,
  type HeaderFilter,
  headerFilter,
} from './headers.js'

/**
 * The seam between the library and a host's response object (Node `ServerResponse`, a Web
 * `Response` under construction, a test double). See `webSink()` and `nodeSink()`.
 *
 * @group Downstream
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
  /**
   * How many bytes the client has taken so far: the bytes written minus those this process
   * still buffers for it. With it, the write-stall bound measures the client's progress (a
   * client that took no byte for the bound), not one write's wait; without it, a write not
   * taken within the bound is a stall. `nodeSink` and `webSink` have it.
   */
  bytesTaken?(): number
}

/**
 * Where a gate stands. Only ever moves forward.
 *
 * @group Downstream
 */
export type GateState = 'open' | 'headers-committed' | 'content-committed' | 'closed'

/**
 * Options of {@link createCommitGate}.
 *
 * @group Downstream
 */
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
   * so idle proxies and clients keep the connection. It never counts as content. `Infinity`
   * disables; `0` is a `RangeError` (the one rule for every bound).
   * @default 15_000
   */
  keepAliveIntervalMs?: number
  /**
   * Whether keep-alive comments go on once content was written. `false` writes them only
   * between the headers and the first content, for clients or translators that take every
   * frame for an event of their protocol (see `DownstreamOptions.keepAlive`).
   * @default true
   */
  keepAliveAfterContent?: boolean
  /**
   * Which upstream response headers pass on to the client with the head (see
   * {@link ForwardHeadersPolicy}). By default only request ids, processing time and
   * `retry-after`: never upstream account identifiers, and per-key rate-limit headers only
   * with `rateLimit: true`. The gate's own and the host's headers win over these.
   * @default forwardHeadersDefaults
   * @example { forwardHeaders: { allow: [...forwardHeadersDefaults.allow, 'openai-model'] } }
   */
  forwardHeaders?: ForwardHeadersPolicy
  /**
   * A keep-alive the gate writes itself that the client has not taken after this many
   * milliseconds fails the gate (`DownstreamClosedError` whose `cause` is a `write-stall`
   * `StreamTimeoutError`), so a client that stopped reading is not held open by keep-alives.
   * Content writes are bounded by the pump's `writeStallTimeoutMs`; give both the same value.
   * `Infinity` turns it off; `0`, negatives and `NaN` are a `RangeError`.
   * @default 60_000 (a minute without taking one byte is a client that stopped reading)
   */
  writeStallTimeoutMs?: number
}

/**
 * Defaults of {@link CommitGateOptions}.
 *
 * @group Downstream
 */
export const commitGateDefaults = Object.freeze({
  status: 200,
  earlyHeaders: false,
  keepAliveIntervalMs: 15_000,
  keepAliveAfterContent: true,
  writeStallTimeoutMs: 60_000,
})

const keepAliveBytes = new TextEncoder().encode(': keep-alive\n\n')
const done: Promise<void> = Promise.resolve()

/**
 * The downstream side of one request. Create one per request, over its sink.
 *
 * @group Downstream
 */
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
   * Whether the response was delivered: the gate ended it normally (`close()`, or a whole
   * `answer()`/`respond()`) and the sink's `close()` resolved with no downstream failure
   * before it. For `nodeSink` that is the response's `finish` (every byte handed to the
   * operating system); for `webSink`, the body closed with every byte queued for the reader.
   * Once true it stays true: nothing that happens to the request afterwards (an abort, the
   * response's `close` event, a signal) undoes a delivered answer.
   */
  readonly delivered: boolean
  /**
   * True while a write (or the head) was handed to the sink and not yet taken: the client is
   * applying backpressure. A pump reads it right after `write()` to tell a blocked write
   * from one that went through at once.
   */
  readonly writePending: boolean
  /**
   * The sink's {@link DownstreamSink.bytesTaken}: how many bytes the client has taken so far,
   * or `undefined` when the sink cannot tell (or its count threw).
   */
  readonly bytesTaken: number | undefined
  /**
   * Sets the upstream's headers to pass on with the head (replacing those of an earlier
   * attempt), filtered by `forwardHeaders`, each value redacted: `secrets` (the keys the
   * attempt carried) by value, anything shaped like a key by shape. Ignored once headers were
   * sent; the gate's own and the host's headers win.
   */
  setUpstreamHeaders(headers: Headers, secrets?: readonly string[]): void
  /** Sends the SSE head if it was not sent. */
  commitHeaders(): Promise<void>
  /** Writes content bytes, committing headers and content first. Waits for backpressure. */
  write(bytes: Uint8Array): Promise<void>
  /**
   * Answers with a real status and body instead of a stream (a failure before anything was
   * sent). Throws {@link HeadersSentError} once headers were sent.
   */
  respond(status: number, body: string, headers?: HeadersInit): Promise<void>
  /**
   * Sends a whole answer (a client's non-streaming request): `status`, the forwarded upstream
   * headers, the host's headers and `contentType`, then `body` and the end. It commits
   * content. Throws {@link HeadersSentError} once headers were sent.
   */
  answer(status: number, body: Uint8Array, contentType: string): Promise<void>
  /** Throws {@link RetryAfterCommitError} when content was committed: call before each new attempt. */
  assertCanRetry(): void
  /** Ends the response normally (sending the head first if nothing was sent). */
  close(): Promise<void>
  /** Ends the response abnormally. */
  abort(reason?: unknown): void
}

const optionKeys = Object.keys({
  status: true,
  headers: true,
  earlyHeaders: true,
  keepAliveIntervalMs: true,
  keepAliveAfterContent: true,
  forwardHeaders: true,
  writeStallTimeoutMs: true,
} satisfies Record<keyof CommitGateOptions, true>)

function normalize(options: CommitGateOptions) {
  rejectUnknownKeys('createCommitGate', options, optionKeys)
  const status = options.status ?? commitGateDefaults.status
  if (!Number.isInteger(status) || status < 200 || status > 599) {
    throw new RangeError(`status must be an HTTP status from 200 to 599, got ${String(status)}`)
  }
  // The one rule for every bound: `Infinity` turns it off, `0` is a `RangeError`.
  const keepAliveIntervalMs = timeoutMilliseconds(
    'keepAliveIntervalMs',
    options.keepAliveIntervalMs ?? commitGateDefaults.keepAliveIntervalMs,
  )
  return {
    status,
    // Inside the gate, 0 stands for "no keep-alive timer".
    keepAliveIntervalMs: keepAliveIntervalMs === Number.POSITIVE_INFINITY ? 0 : keepAliveIntervalMs,
    writeStallTimeoutMs: timeoutMilliseconds(
      'writeStallTimeoutMs',
      options.writeStallTimeoutMs ?? commitGateDefaults.writeStallTimeoutMs,
    ),
    earlyHeaders: options.earlyHeaders ?? commitGateDefaults.earlyHeaders,
    keepAliveAfterContent:
      options.keepAliveAfterContent ?? commitGateDefaults.keepAliveAfterContent,
    forward: headerFilter(options.forwardHeaders),
  }
}

class Gate implements CommitGate {
  readonly #sink: DownstreamSink
  /** What aborts when the client is gone (`stopOf`: the sink's own stop when it has one). */
  readonly #gone: SignalLike
  readonly #status: number
  /** The host's headers; the head is built only when it is sent (idle streams hold no Headers). */
  readonly #hostHeaders: HeadersInit | undefined
  #upstreamHeaders: Record<string, string> | undefined
  readonly #forward: HeaderFilter
  readonly #keepAliveMs: number
  readonly #keepAliveAfterContent: boolean
  readonly #writeStallMs: number
  #keepAliveStall: ReturnType<typeof setTimeout> | undefined
  readonly earlyHeaders: boolean
  /** Aborts when the gate fails; the public `signal` is made from it only when asked for. */
  readonly #stop = new Stop()
  #state: GateState = 'open'
  #failure: DownstreamClosedError | undefined
  #bytes = 0
  #delivered = false
  /** Writes run one after another: a keep-alive never lands inside a frame. */
  #tail: Promise<void> = Promise.resolve()
  #pending = 0
  /** A close was started and the sink has not finished it. */
  #closing = false
  /** Writes the sink finished; the keep-alive timer compares it rather than reading a clock per write. */
  #writes = 0
  /** `#writes` at the keep-alive timer's last tick. */
  #writesAtTick = 0
  #timer: ReturnType<typeof setInterval> | undefined
  readonly #onClientGone = () =>
    this.#fail(new DownstreamClosedError('client-gone', this.#gone.reason))

  constructor(sink: DownstreamSink, options: CommitGateOptions) {
    const normalized = normalize(options)
    const { status, keepAliveIntervalMs, writeStallTimeoutMs, earlyHeaders, forward } = normalized
    this.#keepAliveAfterContent = normalized.keepAliveAfterContent
    this.#sink = sink
    this.#forward = forward
    this.#status = status
    this.#keepAliveMs = keepAliveIntervalMs
    this.#writeStallMs = writeStallTimeoutMs
    this.earlyHeaders = earlyHeaders
    this.#hostHeaders = options.headers
    this.#gone = stopOf(sink)
    if (this.#gone.aborted) this.#onClientGone()
    else this.#gone.addEventListener('abort', this.#onClientGone, { once: true })
  }

  get state(): GateState {
    return this.#state
  }

  get canRetry(): boolean {
    return this.#state === 'open' || this.#state === 'headers-committed'
  }

  get signal(): AbortSignal {
    return this.#stop.real
  }

  get [ownStop](): SignalLike {
    return this.#stop
  }

  get failure(): DownstreamClosedError | undefined {
    return this.#failure
  }

  get bytesWritten(): number {
    return this.#bytes
  }

  get delivered(): boolean {
    return this.#delivered
  }

  get writePending(): boolean {
    return this.#pending > 0
  }

  get bytesTaken(): number | undefined {
    try {
      const taken = this.#sink.bytesTaken?.()
      return typeof taken === 'number' && Number.isFinite(taken) ? taken : undefined
    } catch {
      // A sink's own code: a throw only means it cannot tell.
      return undefined
    }
  }

  #fail(error: DownstreamClosedError): void {
    if (this.#failure !== undefined) return
    this.#failure = error
    this.#state = 'closed'
    this.#stopKeepAlive()
    this.#dropKeepAliveStall()
    this.#gone.removeEventListener('abort', this.#onClientGone)
    this.#stop.abort(error)
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
        this.#writes++
      }
    })
    this.#tail = step.catch(() => {})
    return step
  }

  setUpstreamHeaders(headers: Headers, secrets?: readonly string[]): void {
    if (this.#state === 'open')
      this.#upstreamHeaders = filterHeaderRecord(headers, this.#forward, secrets)
  }

  commitHeaders(): Promise<void> {
    return this.#commitHeaders(true)
  }

  /**
   * Sends the head; `flush` pushes it out on its own. Without it (content or a close is queued
   * right behind it), the head leaves with the first bytes: one packet, not two.
   */
  async #commitHeaders(flush: boolean): Promise<void> {
    this.#ensureUsable()
    if (this.#state !== 'open') return
    this.#state = 'headers-committed'
    await this.#run(async () => {
      await sendHead(this.#sink, this.#status, this.#head())
      if (flush) await this.#sink.flush?.()
    })
    this.#startKeepAlive()
  }

  write(bytes: Uint8Array): Promise<void> {
    // Hot path: nothing queued: write straight through, and allocate no promise chain when
    // the sink takes the bytes (and the head before them) synchronously.
    if (this.#pending === 0 && this.#failure === undefined) {
      if (this.#state === 'content-committed') return this.#writeNow(bytes, false)
      if (this.#state !== 'closed') return this.#writeNow(bytes, this.#state === 'open')
    }
    return this.#writeQueued(bytes)
  }

  /**
   * A write with nothing queued before it (and the head first when `withHead`): straight to
   * the sink, in this tick, with no queue hop; what the sink does not finish at once becomes
   * the queue's tail. Every sink call counts as one write, as through `#run`.
   */
  #writeNow(bytes: Uint8Array, withHead: boolean): Promise<void> {
    const first = this.#state !== 'content-committed'
    this.#state = 'content-committed'
    this.#bytes += bytes.length
    let written: void | Promise<void>
    try {
      if (first && !this.#keepAliveAfterContent) this.#stopKeepAlive()
      const head = withHead ? sendHead(this.#sink, this.#status, this.#head()) : undefined
      if (head !== undefined) {
        written = head.then(() => {
          this.#writes++
          this.#startKeepAlive()
          return this.#sink.write(bytes)
        })
      } else {
        if (withHead) {
          this.#writes++
          this.#startKeepAlive()
        }
        written = this.#sink.write(bytes)
      }
    } catch (error) {
      this.#fail(new DownstreamClosedError('write-failed', error))
      return Promise.reject(this.#failure)
    }
    if (written === undefined) {
      this.#writes++
      return done
    }
    return this.#track(written)
  }

  /** The SSE head: the filtered upstream headers (this gate's own copy), the defaults, the host's. */
  #head(): Record<string, string> {
    const head = this.#upstreamHeaders ?? {}
    for (const name of Object.keys(sseHeaders)) head[name] = sseHeaders[name] as string
    setEach(head, this.#hostHeaders)
    return head
  }

  /** Follows a sink write that did not complete at once, as the queue's tail. */
  #track(written: Promise<void>): Promise<void> {
    this.#pending++
    const step = written.then(
      () => {
        this.#pending--
        this.#writes++
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
    const head = this.#state === 'open' ? this.#commitHeaders(false) : undefined
    this.#state = 'content-committed'
    if (!this.#keepAliveAfterContent) this.#stopKeepAlive()
    this.#bytes += bytes.length
    await Promise.all([head, this.#run(() => this.#sink.write(bytes))])
  }

  async respond(status: number, body: string, headers?: HeadersInit): Promise<void> {
    this.#ensureUsable()
    if (this.#state !== 'open') throw new HeadersSentError()
    this.#state = 'closed'
    const head: Record<string, string> = {
      'content-type': 'application/json',
      'cache-control': 'no-store',
    }
    setEach(head, headers)
    await this.#run(async () => {
      await sendHead(this.#sink, status, head)
      if (body !== '') await this.#sink.write(new TextEncoder().encode(body))
      await this.#sink.close()
    })
    this.#delivered = true
    this.#release()
  }

  async answer(status: number, body: Uint8Array, contentType: string): Promise<void> {
    this.#ensureUsable()
    if (this.#state !== 'open') throw new HeadersSentError()
    this.#state = 'closed'
    const head = this.#upstreamHeaders ?? {}
    head['content-type'] = contentType
    setEach(head, this.#hostHeaders)
    this.#bytes += body.length
    await this.#run(async () => {
      await sendHead(this.#sink, status, head)
      if (body.length > 0) await this.#sink.write(body)
      await this.#sink.close()
    })
    this.#delivered = true
    this.#release()
  }

  assertCanRetry(): void {
    if (this.#state === 'content-committed') throw new RetryAfterCommitError()
    if (this.#failure !== undefined) throw this.#failure
  }

  close(): Promise<void> {
    if (this.#failure !== undefined || this.#state === 'closed') return done
    const head = this.#state === 'open' ? this.#commitHeaders(false) : undefined
    this.#state = 'closed'
    this.#closing = true
    this.#stopKeepAlive()
    // Nothing queued: the sink closes in this tick, with no queue hop.
    const closed =
      head === undefined && this.#pending === 0
        ? this.#closeNow()
        : Promise.all([head, this.#run(() => this.#sink.close())])
    if (closed === undefined) {
      this.#closed()
      return done
    }
    return closed.then(
      () => this.#closed(),
      () => this.#closed(),
    )
  }

  /** The sink's close with nothing before it: `undefined` when it finished at once. */
  #closeNow(): Promise<void> | undefined {
    let closed: void | Promise<void>
    try {
      closed = this.#sink.close()
    } catch (error) {
      this.#fail(new DownstreamClosedError('write-failed', error))
      return undefined
    }
    if (closed === undefined) {
      this.#writes++
      return undefined
    }
    return this.#track(closed)
  }

  /** A close finished (or failed): an abort while the sink was closing (`#closing` cleared) cut the response instead. */
  #closed(): void {
    if (this.#closing && this.#failure === undefined) this.#delivered = true
    this.#closing = false
    this.#release()
  }

  abort(reason?: unknown): void {
    // A close the client never lets finish (it stopped reading) can still be cut.
    if (this.#state === 'closed' && !this.#closing) return
    this.#closing = false
    this.#state = 'closed'
    this.#stopKeepAlive()
    this.#dropKeepAliveStall()
    this.#release()
    try {
      this.#sink.abort(reason)
    } catch {
      // Already gone.
    }
  }

  #release(): void {
    this.#gone.removeEventListener('abort', this.#onClientGone)
  }

  #startKeepAlive(): void {
    if (this.#keepAliveMs === 0 || this.#timer !== undefined || this.#state === 'closed') return
    if (this.#state === 'content-committed' && !this.#keepAliveAfterContent) return
    // The interval starts at the last write (the head): a tick with no write since is idle.
    this.#writesAtTick = this.#writes
    // Referenced: it runs only while the request is open, and every ending stops it.
    this.#timer = setInterval(() => {
      if (this.#state === 'closed' || this.#pending > 0) return
      // Something was written since the last tick, so less than an interval ago.
      if (this.#writes !== this.#writesAtTick) {
        this.#writesAtTick = this.#writes
        return
      }
      // The keep-alive's own write does not put off the next one.
      this.#writesAtTick = this.#writes + 1
      this.#run(() => this.#writeKeepAlive()).catch(() => {})
    }, this.#keepAliveMs)
  }

  /** A keep-alive write, failed when the client has not taken it within the stall bound. */
  #writeKeepAlive(): void | Promise<void> {
    const written = this.#sink.write(keepAliveBytes)
    if (written === undefined || this.#writeStallMs === Number.POSITIVE_INFINITY) return written
    const ms = this.#writeStallMs
    return new Promise<void>((resolve, reject) => {
      this.#keepAliveStall = setTimeout(() => reject(new StreamTimeoutError('write-stall', ms)), ms)
      const settle = () => {
        clearTimeout(this.#keepAliveStall)
        this.#keepAliveStall = undefined
      }
      written.then(
        () => {
          settle()
          resolve()
        },
        (error: unknown) => {
          settle()
          reject(error)
        },
      )
    })
  }

  #stopKeepAlive(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
  }

  /** On a failure or abort only: a close still needs the bound on a keep-alive queued before it. */
  #dropKeepAliveStall(): void {
    if (this.#keepAliveStall !== undefined) clearTimeout(this.#keepAliveStall)
    this.#keepAliveStall = undefined
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
 *
 * @group Downstream
 */
export function createCommitGate(
  sink: DownstreamSink,
  options: CommitGateOptions = {},
): CommitGate {
  return new Gate(sink, options)
}
