/**
 * Pieces every adapter shares: safe JSON parsing, the verdict for frames without data,
 * retryability of upstream error types, and SSE encoding of rendered frames.
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'
import { indexOfByte } from '../sse/index-of.js'
import { sanitizeMessage } from './sanitize.js'
import type {
  ErrorVerdict,
  FrameVerdict,
  RenderableError,
  StreamAdapter,
  TerminalReason,
  UpstreamErrorInfo,
} from './types.js'

const encoder = new TextEncoder()

/** A parsed JSON object, or `undefined` when `text` is not a JSON object. */
export function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text)
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined
  } catch {
    return undefined
  }
}

/** The longest frame data whose parse is kept (a first frame's, as the tracker keeps it). */
const keptParseChars = 16_384
let keptText: string | undefined
let keptValue: Record<string, unknown> | undefined

/**
 * {@link parseObject} for a frame's data, read only: the last parse is kept, so the same data
 * asked again (the first frame's, by the relay's identity and the adapter's renders after the
 * peek's inspect) is not parsed twice (docs/performance.md). Callers must not change what it
 * returns.
 */
export function parseData(text: string): Record<string, unknown> | undefined {
  if (text === keptText) return keptValue
  const value = parseObject(text)
  if (text.length <= keptParseChars) {
    keptText = text
    keptValue = value
  }
  return value
}

/** A property of an unknown value, if it is an object. */
export function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null
    ? (value as Record<string, unknown>)[key]
    : undefined
}

/** A string property, or `undefined`. */
export function stringField(value: unknown, key: string): string | undefined {
  const found = field(value, key)
  return typeof found === 'string' ? found : undefined
}

/** A non-empty string property, or `undefined`. */
export function textField(value: unknown, key: string): string | undefined {
  const found = field(value, key)
  return typeof found === 'string' && found.length > 0 ? found : undefined
}

const retryableTypes = new Set([
  'overloaded_error',
  'rate_limit_error',
  'rate_limit_exceeded',
  'api_error',
  'server_error',
  'internal_error',
  'internal_server_error',
  'service_unavailable',
  'service_unavailable_error',
  'timeout',
  'timeout_error',
  'upstream_error',
  'malformed_frame',
  'UNAVAILABLE',
  'RESOURCE_EXHAUSTED',
  'INTERNAL',
  'DEADLINE_EXCEEDED',
  'ABORTED',
])

const fatalTypes = new Set([
  'invalid_request_error',
  'authentication_error',
  'permission_error',
  'not_found_error',
  'request_too_large',
  'context_length_exceeded',
  'invalid_prompt',
  'billing_error',
  'INVALID_ARGUMENT',
  'PERMISSION_DENIED',
  'NOT_FOUND',
  'FAILED_PRECONDITION',
  'UNAUTHENTICATED',
  'OUT_OF_RANGE',
])

/**
 * Whether an upstream error type (or code, or HTTP-like status) is worth another attempt:
 * overload, rate limits and 5xx-like types are; invalid requests, auth and context-length
 * errors are not. Unknown types are retryable: before output, one more attempt is cheap.
 *
 * @group Protocols
 */
export function isRetryableErrorType(
  type: string,
  code?: string | null,
  status?: number | null,
): boolean {
  for (const word of [type, code]) {
    if (word == null) continue
    if (fatalTypes.has(word)) return false
    if (retryableTypes.has(word)) return true
  }
  if (typeof status === 'number') {
    return status === 408 || status === 409 || status === 429 || status >= 500
  }
  return true
}

/** How many stringified errors deep a message is unwrapped. */
const maxNestedErrors = 3

/**
 * An error whose message is itself a stringified error (`{"error":{"message":"{\"type\":
 * \"overloaded_error\",…}"}}`, as some proxies and cloud hosts wrap a provider's error):
 * the innermost message, and its type and code, which say more than the wrapper's.
 */
function unwrapNested(
  type: string,
  message: string | undefined,
  code: string | null,
): { type: string; message: string | undefined; code: string | null } {
  let found = { type, message, code }
  for (let depth = 0; depth < maxNestedErrors; depth++) {
    const text = found.message?.trim()
    if (text === undefined || !text.startsWith('{')) break
    const parsed = parseObject(text)
    const inner = typeof parsed?.error === 'object' && parsed.error !== null ? parsed.error : parsed
    const innerMessage = stringField(inner, 'message')
    if (innerMessage === undefined) break
    found = {
      type: stringField(inner, 'type') ?? found.type,
      message: innerMessage,
      code: stringField(inner, 'code') ?? found.code,
    }
  }
  return found
}

/**
 * Builds the error info of an error verdict, sanitising the message; a message that is a
 * stringified error is unwrapped to the error inside it.
 */
export function upstreamError(
  type: string,
  message: string | undefined,
  code: string | null = null,
  status: number | null = null,
): UpstreamErrorInfo {
  const inner = unwrapNested(type, message, code)
  return {
    type: inner.type,
    message: sanitizeMessage(inner.message ?? inner.type),
    code: inner.code,
    status,
    retryable: isRetryableErrorType(inner.type, inner.code, status),
  }
}

/** The verdict for a frame whose data could not be read. */
export function malformedFrame(detail: string): ErrorVerdict {
  return {
    kind: 'error',
    error: {
      type: 'malformed_frame',
      message: sanitizeMessage(detail),
      code: 'MALFORMED_FRAME',
      status: null,
      retryable: true,
    },
  }
}

function onlyLineBreaks(raw: Uint8Array): boolean {
  for (let i = 0; i < raw.length; i++) {
    const byte = raw[i]
    if (byte !== 10 && byte !== 13) return false
  }
  return true
}

/**
 * The verdict for a frame without a `data` field: comments and empty frames are keep-alives,
 * a lone `event`/`id`/`retry` is bookkeeping, and anything else is not SSE at all (an HTML
 * page, a bare JSON error): an error verdict, with the upstream's own error when the bytes
 * are a JSON error object.
 */
export function inspectWithoutData(
  frame: SseFrame,
  errorOf: (body: Record<string, unknown>) => ErrorVerdict | undefined,
): FrameVerdict {
  if (frame.comments.length > 0) return { kind: 'keepalive' }
  if (frame.event !== undefined || frame.id !== undefined || frame.retry !== undefined)
    return { kind: 'meta' }
  if (onlyLineBreaks(frame.raw)) return { kind: 'keepalive' }
  const text = new TextDecoder().decode(frame.raw)
  const body = parseObject(text.trim())
  const fromBody = body === undefined ? undefined : errorOf(body)
  if (fromBody !== undefined) return fromBody
  return malformedFrame(`upstream sent a body that is not SSE: ${text}`)
}

/** Encodes one SSE frame: an optional `event:` line, the data, and the blank line. */
export function sseFrameText(data: string, event?: string): string {
  return event === undefined ? `data: ${data}\n\n` : `event: ${event}\ndata: ${data}\n\n`
}

/** Encodes rendered SSE text as bytes. */
export function encode(text: string): Uint8Array {
  return encoder.encode(text)
}

/** The sanitised parts of an error to render. */
export function renderable(error: RenderableError): {
  type: string
  message: string
  code: string | null
} {
  return { type: error.type, message: sanitizeMessage(error.message), code: error.code ?? null }
}

/** Maps a protocol's finish word through a table, falling back to `other`. */
export function mapReason(
  table: Readonly<Record<string, TerminalReason>>,
  raw: string,
): TerminalReason {
  return Object.hasOwn(table, raw) ? (table[raw] as TerminalReason) : 'other'
}

/** The adapter's JSON error body for `error`, or a generic `{"error":{…}}` one. */
export function errorBodyFor(adapter: StreamAdapter, error: RenderableError): string {
  if (adapter.renderErrorBody !== undefined) return adapter.renderErrorBody(error)
  const { type, message, code } = renderable(error)
  return JSON.stringify({ error: { type, message, code } })
}

/** How deep {@link carriesContent} looks into nested objects and arrays. */
const maxContentDepth = 8

/**
 * Whether a value holds anything a client could show: a non-empty string anywhere inside it,
 * members named in `skip` (ids, indexes, types, obfuscation padding) left out at every depth.
 * Numbers, booleans and `null` are never content (token ids, flags). Adapters use it for what
 * they do not know (an unknown event, item, block or part type): with content it is output,
 * without it bookkeeping (guarantee 27 in docs/guarantees.md).
 */
export function carriesContent(value: unknown, skip: ReadonlySet<string>, depth = 0): boolean {
  if (typeof value === 'string') return value.length > 0
  if (typeof value !== 'object' || value === null) return false
  // Deeper than any protocol nests: unknown, so content (fail open).
  if (depth > maxContentDepth) return true
  if (Array.isArray(value)) return value.some((item) => carriesContent(item, skip, depth + 1))
  for (const [key, member] of Object.entries(value)) {
    if (!skip.has(key) && carriesContent(member, skip, depth + 1)) return true
  }
  return false
}

/** The verdict for content an adapter does not know the kind of: output, as text with no text. */
export const unknownOutput = Object.freeze({ kind: 'text', text: '' } as const)

/**
 * Whether `raw` has no line break from `from` up to its trailing ones: a quick check that a
 * frame ends on the line it is at (no `event: error` line after its data makes it an error).
 */
export function noLineBreakFrom(raw: Uint8Array, from: number): boolean {
  let end = raw.length
  while (end > from && (raw[end - 1] === 10 || raw[end - 1] === 13)) end--
  const lf = indexOfByte(raw, 10, from)
  const cr = indexOfByte(raw, 13, from)
  return (lf === -1 || lf >= end) && (cr === -1 || cr >= end)
}
