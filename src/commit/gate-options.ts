/**
 * What a commit gate is given and what it promises: the sink seam, the gate's options and
 * their defaults, and the `CommitGate` interface. The gate itself is in `gate.ts`.
 *
 * @module
 */

import type { DownstreamClosedError } from '../errors.js'
import { countNormalization, rejectUnknownKeys, timeoutMilliseconds } from '../options.js'
import { type ForwardHeadersPolicy, type HeaderFilter, headerFilter } from './headers.js'

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
  /**
   * When the sink saw {@link DownstreamSink.bytesTaken}'s count reached (`performance.now()`
   * time, from an event such as a drain, a write's callback or the consumer's pull), or
   * `undefined` when the count moved since without an event it saw. With it, a client's last
   * byte is timed when it happened rather than when the write-stall clock next looks.
   */
  bytesTakenAt?(): number | undefined
}

/**
 * Where a gate stands. Only ever moves forward.
 *
 * @group Downstream
 */
export type GateState = 'open' | 'headers-committed' | 'content-committed' | 'closed'

/**
 * Options of {@link "stream-boundary"!createCommitGate | createCommitGate}.
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
  /** The sink's {@link DownstreamSink.bytesTakenAt}, or `undefined` (or when it threw). */
  readonly bytesTakenAt: number | undefined
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
   * sent). Throws {@link "stream-boundary"!HeadersSentError | HeadersSentError} once headers
   * were sent.
   */
  respond(status: number, body: string, headers?: HeadersInit): Promise<void>
  /**
   * Sends a whole answer (a client's non-streaming request): `status`, the forwarded upstream
   * headers, the host's headers and `contentType`, then `body` and the end. It commits
   * content. Throws {@link "stream-boundary"!HeadersSentError | HeadersSentError} once
   * headers were sent.
   */
  answer(status: number, body: Uint8Array, contentType: string): Promise<void>
  /**
   * Throws {@link "stream-boundary"!RetryAfterCommitError | RetryAfterCommitError} when
   * content was committed: call before each new attempt.
   */
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

/** A gate's options checked and with their defaults: what a gate is made from. */
export interface NormalizedGateOptions {
  readonly status: number
  /** 0 stands for "no keep-alive timer". */
  readonly keepAliveIntervalMs: number
  readonly writeStallTimeoutMs: number
  readonly earlyHeaders: boolean
  readonly keepAliveAfterContent: boolean
  readonly forward: HeaderFilter
  readonly headers: HeadersInit | undefined
}

/** Checks a gate's options (exact messages) and fills in the defaults. */
export function normalizeGateOptions(options: CommitGateOptions): NormalizedGateOptions {
  countNormalization('createCommitGate')
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
    headers: options.headers,
  }
}
