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
import { ownStop, type SignalLike, Stop, stopOf } from '../stop.js'
import {
  type CommitGate,
  type CommitGateOptions,
  type DownstreamSink,
  type GateState,
  type NormalizedGateOptions,
  normalizeGateOptions,
} from './gate-options.js'
import { sendHead, setEach, sseHeaders } from './head.js'
import { filterHeaderRecord, type HeaderFilter } from './headers.js'

const keepAliveBytes = new TextEncoder().encode(': keep-alive\n\n')
const done: Promise<void> = Promise.resolve()

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
  #tail: Promise<void> = done
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

  constructor(sink: DownstreamSink, normalized: NormalizedGateOptions) {
    const { status, keepAliveIntervalMs, writeStallTimeoutMs, earlyHeaders, forward } = normalized
    this.#keepAliveAfterContent = normalized.keepAliveAfterContent
    this.#sink = sink
    this.#forward = forward
    this.#status = status
    this.#keepAliveMs = keepAliveIntervalMs
    this.#writeStallMs = writeStallTimeoutMs
    this.earlyHeaders = earlyHeaders
    this.#hostHeaders = normalized.headers
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

  get bytesTakenAt(): number | undefined {
    try {
      const at = this.#sink.bytesTakenAt?.()
      return typeof at === 'number' && Number.isFinite(at) ? at : undefined
    } catch {
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
  return new Gate(sink, normalizeGateOptions(options))
}

/**
 * {@link createCommitGate} as the relay calls it: its options were checked when the relay was
 * built (guarantee 30: nothing is normalised again per request).
 */
export function commitGateOn(sink: DownstreamSink, options: NormalizedGateOptions): CommitGate {
  return new Gate(sink, options)
}
