/**
 * Error classes of stream-boundary. Every error has a stable `code`, its data on readonly
 * fields and the wrapped error in `cause`. The `isX()` guards match on a brand, so they
 * work across two copies of the package.
 *
 * @module
 */

const brand: unique symbol = Symbol.for('stream-boundary.error')

/** Stable codes of every error this package throws or reports. */
export type ErrorCode = 'FRAME_TOO_LARGE' | 'UPSTREAM_READ_FAILED' | 'READER_BUSY'

/** Base class of every error this package creates. */
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

/** True for any error created by stream-boundary (any copy of the package). */
export function isStreamBoundaryError(value: unknown): value is StreamBoundaryError {
  return hasCode(value)
}

/**
 * A single SSE frame grew past `maxFrameBytes`. The reader stops instead of buffering more;
 * frames before this one were delivered intact.
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

/** True when `value` is a {@link FrameTooLargeError}. */
export function isFrameTooLargeError(value: unknown): value is FrameTooLargeError {
  return hasCode(value, 'FRAME_TOO_LARGE')
}

/**
 * Reading the upstream body failed (a reset connection, an undici `terminated`). Bytes that
 * arrived before the failure stay buffered in the reader.
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

/** True when `value` is an {@link UpstreamReadError}. */
export function isUpstreamReadError(value: unknown): value is UpstreamReadError {
  return hasCode(value, 'UPSTREAM_READ_FAILED')
}

/** `next()` was called on a frame reader while an earlier `next()` was still pending. */
export class ReaderBusyError extends StreamBoundaryError {
  override readonly name = 'ReaderBusyError' as const

  constructor() {
    super(
      'READER_BUSY',
      'FrameReader.next() was called while a previous next() was still pending; await each call before the next',
    )
  }
}

/** True when `value` is a {@link ReaderBusyError}. */
export function isReaderBusyError(value: unknown): value is ReaderBusyError {
  return hasCode(value, 'READER_BUSY')
}
