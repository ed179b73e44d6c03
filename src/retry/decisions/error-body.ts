/**
 * Reading an upstream's error body: a bounded prefix of it, and the error it states in any
 * of the shipped protocols' shapes, sanitised.
 *
 * @module
 */

import { settleWithin } from '../../call-safely.js'
import { field, parseObject, stringField, upstreamError } from '../../protocols/common.js'
import { sanitizeMessage } from '../../protocols/sanitize.js'
import type { UpstreamErrorInfo } from '../../protocols/types.js'
import { readWithin } from '../request/request-body.js'

/** Reads a bounded prefix of a body as text and releases the rest. */
export async function readBounded(
  body: ReadableStream<Uint8Array> | null,
  limit: number,
  signal?: AbortSignal,
): Promise<string> {
  if (body === null) return ''
  const reader = body.getReader()
  // An attempt stopped while its error body is read (another attempt won, a timeout, the
  // client left) stops reading at once, whatever the body's own source does.
  const stop = () => void reader.cancel(signal?.reason).catch(() => {})
  if (signal?.aborted) stop()
  else signal?.addEventListener('abort', stop, { once: true })
  const decoder = new TextDecoder()
  let text = ''
  let read = 0
  try {
    while (read < limit) {
      const { done, value } = await reader.read()
      if (done) return text + decoder.decode()
      read += value.length
      text += decoder.decode(value.length > limit ? value.subarray(0, limit) : value, {
        stream: true,
      })
    }
    return text
  } catch {
    return text
  } finally {
    signal?.removeEventListener('abort', stop)
    // The body's own `cancel()` is user code: waited for a short grace only.
    await settleWithin(reader.cancel())
  }
}

/** A whole body read within a bound: its bytes, or why it could not be had. */
export type WholeBody =
  | { readonly kind: 'read'; readonly bytes: Uint8Array }
  | { readonly kind: 'too-large'; readonly limit: number }
  | { readonly kind: 'failed'; readonly error: unknown }

/** Whether a `content-length` declares more than `limit` bytes (an unreadable one does not). */
export function declaresMoreThan(contentLength: string | null, limit: number): boolean {
  return (
    contentLength !== null && /^\s*\d+\s*$/.test(contentLength) && Number(contentLength) > limit
  )
}

/**
 * Reads a whole body (a non-streaming answer) of at most `limit` bytes. A body whose
 * `contentLength` declares more is cancelled before a byte is read, as a request body is;
 * past the bound the body is cancelled and nothing is kept; a read that breaks (a cut, an
 * abort) is `failed`.
 */
export async function readWhole(
  body: ReadableStream<Uint8Array> | null,
  limit: number,
  signal: AbortSignal,
  contentLength: string | null = null,
): Promise<WholeBody> {
  if (body === null) return { kind: 'read', bytes: new Uint8Array(0) }
  if (declaresMoreThan(contentLength, limit)) {
    await settleWithin(body.cancel())
    return { kind: 'too-large', limit }
  }
  const reader = body.getReader()
  const stop = () => void reader.cancel(signal.reason).catch(() => {})
  if (signal.aborted) stop()
  else signal.addEventListener('abort', stop, { once: true })
  try {
    const bytes = await readWithin(reader, limit)
    return bytes === undefined ? { kind: 'too-large', limit } : { kind: 'read', bytes }
  } catch (error) {
    return { kind: 'failed', error }
  } finally {
    signal.removeEventListener('abort', stop)
    // The body's own `cancel()` is user code: waited for a short grace only.
    await settleWithin(reader.cancel())
  }
}

/**
 * The error type to report for a body that states none: `rate_limit_error` for a 429,
 * `invalid_request_error` for other 4xx, `upstream_error` otherwise (a 5xx, or a page served
 * with 2xx: the upstream's fault, never the client's).
 */
export function errorTypeForStatus(status: number): string {
  if (status === 429) return 'rate_limit_error'
  return status >= 400 && status < 500 ? 'invalid_request_error' : 'upstream_error'
}

/**
 * The error an upstream's error body states (OpenAI, Anthropic, Gemini shapes), sanitised.
 * A body in no known shape (an HTML page, proxy text) becomes a message typed by
 * {@link errorTypeForStatus}.
 */
export function errorFromBody(text: string, status: number): UpstreamErrorInfo | undefined {
  const body = parseObject(text.trim())
  const error = body === undefined ? undefined : body.error
  if (typeof error === 'object' && error !== null) {
    const code = field(error, 'code')
    const type =
      stringField(error, 'type') ??
      stringField(error, 'status') ??
      (typeof code === 'string' ? code : undefined)
    return upstreamError(
      type ?? 'upstream_error',
      stringField(error, 'message'),
      typeof code === 'string' ? code : null,
      status,
    )
  }
  if (text.trim() === '') return undefined
  return upstreamError(errorTypeForStatus(status), sanitizeMessage(text), null, status)
}
