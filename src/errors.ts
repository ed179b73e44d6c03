/**
 * Error classes of stream-boundary. Every error has a stable `code`, its data on readonly
 * fields and the wrapped error in `cause`. The `isX()` guards match on a brand, so they
 * work across two copies of the package.
 *
 * @module
 */

const brand: unique symbol = Symbol.for('stream-boundary.error')

/**
 * Stable codes of every error this package throws or reports.
 *
 * @group Errors
 */
export type ErrorCode =
  | 'FRAME_TOO_LARGE'
  | 'UPSTREAM_READ_FAILED'
  | 'READER_BUSY'
  | 'FIRST_BYTE_TIMEOUT'
  | 'FIRST_OUTPUT_TIMEOUT'
  | 'SILENCE_TIMEOUT'
  | 'IDLE_TIMEOUT'
  | 'WRITE_STALL_TIMEOUT'
  | 'PEEK_OVERFLOW'
  | 'DOWNSTREAM_CLOSED'
  | 'RETRY_AFTER_COMMIT'
  | 'HEADERS_SENT'
  | 'DEADLINE_EXCEEDED'
  | 'REDIS_UNAVAILABLE'
  | 'REQUEST_BODY_TOO_LARGE'
  | 'USER_CODE_FAILED'
  | 'REQUEST_NOT_SENT'

/**
 * Base class of every error this package creates.
 *
 * @group Errors
 */
export class StreamBoundaryError extends Error {
  /** A stable, documented code; match on this rather than on the message. */
  readonly code: ErrorCode
  readonly [brand] = true

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
    this.name = 'StreamBoundaryError'
  }
}

function hasCode(value: unknown, code?: ErrorCode): value is StreamBoundaryError {
  if (typeof value !== 'object' || value === null) return false
  if ((value as { [brand]?: unknown })[brand] !== true) return false
  return code === undefined || (value as { code?: unknown }).code === code
}

/**
 * True for any error created by stream-boundary (any copy of the package).
 *
 * @group Errors
 */
export function isStreamBoundaryError(value: unknown): value is StreamBoundaryError {
  return hasCode(value)
}

/**
 * A single SSE frame grew past `maxFrameBytes`. The reader stops instead of buffering more;
 * frames before this one were delivered intact.
 *
 * @group Errors
 */
export class FrameTooLargeError extends StreamBoundaryError {
  override readonly name = 'FrameTooLargeError' as const
  /** The configured bound, in bytes. */
  readonly limit: number
  /** How many bytes of the frame had arrived when the bound was crossed. */
  readonly received: number

  constructor(limit: number, received: number) {
    super(
      'FRAME_TOO_LARGE',
      `An SSE frame exceeded maxFrameBytes (${limit} bytes): ${received} bytes arrived without a blank line ending the frame`,
    )
    this.limit = limit
    this.received = received
  }
}

/**
 * True when `value` is a {@link FrameTooLargeError}.
 *
 * @group Errors
 */
export function isFrameTooLargeError(value: unknown): value is FrameTooLargeError {
  return hasCode(value, 'FRAME_TOO_LARGE')
}

/**
 * Reading the upstream body failed (a reset connection, an undici `terminated`). Bytes that
 * arrived before the failure stay buffered in the reader.
 *
 * @group Errors
 */
export class UpstreamReadError extends StreamBoundaryError {
  override readonly name = 'UpstreamReadError' as const

  constructor(cause: unknown) {
    // Only a code or name, never the message: messages can carry URLs with credentials.
    const code = (cause as { code?: unknown } | null)?.code
    const name = cause instanceof Error ? cause.name : undefined
    const detail = typeof code === 'string' ? ` (${code})` : name ? ` (${name})` : ''
    super('UPSTREAM_READ_FAILED', `Reading the upstream body failed${detail}`, { cause })
  }
}

/**
 * True when `value` is an {@link UpstreamReadError}.
 *
 * @group Errors
 */
export function isUpstreamReadError(value: unknown): value is UpstreamReadError {
  return hasCode(value, 'UPSTREAM_READ_FAILED')
}

/**
 * `next()` was called on a frame reader while an earlier `next()` was still pending.
 *
 * @group Errors
 */
export class ReaderBusyError extends StreamBoundaryError {
  override readonly name = 'ReaderBusyError' as const

  constructor() {
    super(
      'READER_BUSY',
      'FrameReader.next() was called while a previous next() was still pending; await each call before the next',
    )
  }
}

/**
 * True when `value` is a {@link ReaderBusyError}.
 *
 * @group Errors
 */
export function isReaderBusyError(value: unknown): value is ReaderBusyError {
  return hasCode(value, 'READER_BUSY')
}

/**
 * Which of the library's watchdogs fired.
 *
 * @group Errors
 */
export type TimeoutKind =
  | 'first-byte'
  | 'first-output'
  | 'silence'
  | 'idle'
  | 'write-stall'
  | 'deadline'

const timeoutCodes = {
  'first-byte': 'FIRST_BYTE_TIMEOUT',
  'first-output': 'FIRST_OUTPUT_TIMEOUT',
  silence: 'SILENCE_TIMEOUT',
  idle: 'IDLE_TIMEOUT',
  'write-stall': 'WRITE_STALL_TIMEOUT',
  deadline: 'DEADLINE_EXCEEDED',
} as const satisfies Record<TimeoutKind, ErrorCode>

const timeoutMessages: Record<TimeoutKind, string> = {
  'first-byte': 'the upstream sent no byte',
  'first-output': 'the upstream sent no output',
  silence: 'before any output, the upstream sent no byte',
  idle: 'the upstream sent nothing but keep-alives',
  'write-stall': 'the client accepted no bytes',
  deadline: 'no attempt produced output',
}

/**
 * A watchdog fired: no upstream byte (`first-byte`), no visible output yet (`first-output`;
 * keep-alives and preambles do not count), no byte at all for too long before output
 * (`silence`; keep-alives count), no output for too long after commit (`idle`;
 * time spent waiting on a slow client does not count), a client that took no bytes for too
 * long (`write-stall`: a downstream failure, never the upstream's fault), or the relay's
 * whole pre-commit budget ran out (`deadline`).
 *
 * @group Errors
 */
export class StreamTimeoutError extends StreamBoundaryError {
  override readonly name = 'StreamTimeoutError' as const
  /** Which watchdog fired. */
  readonly timeout: TimeoutKind
  /** Its bound, in milliseconds. */
  readonly timeoutMs: number

  constructor(timeout: TimeoutKind, timeoutMs: number) {
    super(timeoutCodes[timeout], `${timeoutMessages[timeout]} within ${timeoutMs} ms`)
    this.timeout = timeout
    this.timeoutMs = timeoutMs
  }
}

/**
 * True when `value` is a {@link StreamTimeoutError}, whichever watchdog fired.
 *
 * @group Errors
 */
export function isStreamTimeoutError(value: unknown): value is StreamTimeoutError {
  return Object.values(timeoutCodes).some((code) => hasCode(value, code))
}

/**
 * Peeking held more than `maxPeekBytes` or `maxPeekFrames` before any output.
 *
 * @group Errors
 */
export class PeekOverflowError extends StreamBoundaryError {
  override readonly name = 'PeekOverflowError' as const
  /** Which bound was crossed. */
  readonly bound: 'maxPeekBytes' | 'maxPeekFrames'
  readonly limit: number

  constructor(bound: 'maxPeekBytes' | 'maxPeekFrames', limit: number) {
    super('PEEK_OVERFLOW', `Peeking passed ${bound} (${limit}) before the upstream sent any output`)
    this.bound = bound
    this.limit = limit
  }
}

/**
 * True when `value` is a {@link PeekOverflowError}.
 *
 * @group Errors
 */
export function isPeekOverflowError(value: unknown): value is PeekOverflowError {
  return hasCode(value, 'PEEK_OVERFLOW')
}

/**
 * The downstream side ended the request: the client went away, or a write/flush failed. It
 * is terminal and never the upstream's fault (no key is penalised for it).
 *
 * @group Errors
 */
export class DownstreamClosedError extends StreamBoundaryError {
  override readonly name = 'DownstreamClosedError' as const
  /** `client-gone` (the client disconnected) or `write-failed` (a write or flush threw). */
  readonly reason: 'client-gone' | 'write-failed'

  constructor(reason: 'client-gone' | 'write-failed', cause?: unknown) {
    super(
      'DOWNSTREAM_CLOSED',
      reason === 'client-gone' ? 'The client went away' : 'Writing to the client failed',
      cause === undefined ? undefined : { cause },
    )
    this.reason = reason
  }
}

/**
 * True when `value` is a {@link DownstreamClosedError}.
 *
 * @group Errors
 */
export function isDownstreamClosedError(value: unknown): value is DownstreamClosedError {
  return hasCode(value, 'DOWNSTREAM_CLOSED')
}

/**
 * Something tried to start over after content reached the client: refused, never attempted.
 *
 * @group Errors
 */
export class RetryAfterCommitError extends StreamBoundaryError {
  override readonly name = 'RetryAfterCommitError' as const

  constructor() {
    super(
      'RETRY_AFTER_COMMIT',
      'Content was already sent to the client; a retry would show it output from two attempts',
    )
  }
}

/**
 * True when `value` is a {@link RetryAfterCommitError}.
 *
 * @group Errors
 */
export function isRetryAfterCommitError(value: unknown): value is RetryAfterCommitError {
  return hasCode(value, 'RETRY_AFTER_COMMIT')
}

/**
 * A status response was asked for after the headers were already sent.
 *
 * @group Errors
 */
export class HeadersSentError extends StreamBoundaryError {
  override readonly name = 'HeadersSentError' as const

  constructor() {
    super('HEADERS_SENT', 'The response headers were already sent; write the error in-band instead')
  }
}

/**
 * True when `value` is a {@link HeadersSentError}.
 *
 * @group Errors
 */
export function isHeadersSentError(value: unknown): value is HeadersSentError {
  return hasCode(value, 'HEADERS_SENT')
}

/**
 * A request body grew past `maxRequestBodyBytes`. Reading stopped at the bound (the rest was
 * never read or buffered) and nothing was sent upstream. The message names the bound, never
 * the body.
 *
 * @group Errors
 */
export class RequestBodyTooLargeError extends StreamBoundaryError {
  override readonly name = 'RequestBodyTooLargeError' as const
  /** The configured bound, in bytes. */
  readonly limit: number

  constructor(limit: number) {
    super(
      'REQUEST_BODY_TOO_LARGE',
      `The request body exceeded maxRequestBodyBytes (${limit} bytes); it was not sent upstream`,
    )
    this.limit = limit
  }
}

/**
 * True when `value` is a {@link RequestBodyTooLargeError}.
 *
 * @group Errors
 */
export function isRequestBodyTooLargeError(value: unknown): value is RequestBodyTooLargeError {
  return hasCode(value, 'REQUEST_BODY_TOO_LARGE')
}

/**
 * Code the host gave the library (an adapter method, a transform, a translator, a key pool)
 * threw or returned something it must not. The relay ends the request honestly with it
 * (before commit a 500 naming `component`, after commit the protocol's error frame) instead
 * of leaving the client waiting. The message names the component, never what it threw
 * (that stays in `cause`, which may hold anything, secrets included).
 *
 * @group Errors
 */
export class UserCodeError extends StreamBoundaryError {
  override readonly name = 'UserCodeError' as const
  /** What failed: `adapter.inspect`, `downstream.transform`, `pool.acquire`, ... */
  readonly component: string

  constructor(component: string, cause: unknown, what = 'threw') {
    super('USER_CODE_FAILED', `${component} ${what}`, { cause })
    this.component = component
  }
}

/**
 * True when `value` is a {@link UserCodeError}.
 *
 * @group Errors
 */
export function isUserCodeError(value: unknown): value is UserCodeError {
  return hasCode(value, 'USER_CODE_FAILED')
}

/**
 * Which step of making a request failed before anything left the process: `request` (there
 * is none to send, or the adapter has no header for the key), `url`, `headers`, `body` (it
 * cannot be serialised as JSON) or `attempt` (the attempt function threw before it sent).
 *
 * @group Errors
 */
export type RequestNotSentStep = 'request' | 'url' | 'headers' | 'body' | 'attempt'

/**
 * A request failed before it left the process: its body could not be serialised, its URL or
 * headers could not be built. The ready attempts (`fetchAttempt`, `nodeHttpAttempt`) throw
 * it; the relay reads it (and any error an attempt function throws before it sends, such as a
 * `TypeError` or `RangeError` with no network code) as the request's failure, never the key's:
 * no cooldown, no circuit, no retry on another key, and a 400 (`body`) or 500 in the client's
 * protocol. The message names the step, never the request (that stays in `cause`).
 *
 * @group Errors
 */
export class RequestNotSentError extends StreamBoundaryError {
  override readonly name = 'RequestNotSentError' as const
  /** The step that failed. */
  readonly step: RequestNotSentStep

  constructor(step: RequestNotSentStep, message: string, options?: { cause?: unknown }) {
    super('REQUEST_NOT_SENT', `${message}; the request was not sent`, options)
    this.step = step
  }
}

/**
 * True when `value` is a {@link RequestNotSentError}.
 *
 * @group Errors
 */
export function isRequestNotSentError(value: unknown): value is RequestNotSentError {
  return hasCode(value, 'REQUEST_NOT_SENT')
}
