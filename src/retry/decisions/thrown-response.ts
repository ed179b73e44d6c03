/**
 * The upstream answer an attempt function threw instead of returning: many gateways' HTTP
 * helpers throw on a 4xx/5xx with the response (or its status) on the error. Judged as that
 * response, a 404 stays a 404 and a 429 a rate limit, not a connection failure to retry.
 *
 * The shapes other libraries throw, all read the same way:
 *
 * | library | status | headers | body |
 * | --- | --- | --- | --- |
 * | a thrown `Response` | `status` | `headers` | the body |
 * | ky (`HTTPError`) | `response.status` (a `Response`) | `response.headers` | the body |
 * | ofetch (`FetchError`) | `status`, `statusCode` | `response.headers` | `data` |
 * | axios, gaxios | `response.status` | `response.headers` | `response.data` |
 * | got (`HTTPError`) | `response.statusCode` | `response.headers` | `response.body` |
 * | llms, many SDKs | `statusCode` or `status` | `headers` | — |
 *
 * @module
 */

/** What an error of any of those shapes may carry; every field is read defensively. */
interface ThrownShape {
  readonly response?: unknown
  readonly status?: unknown
  readonly statusCode?: unknown
  readonly headers?: unknown
  readonly data?: unknown
}

/** A status an upstream's refusal can have (a `Response` takes 200–599; 2xx is no refusal). */
function statusOf(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 300 && value <= 599
    ? value
    : undefined
}

/** Statuses whose `Response` cannot have a body. */
const nullBodyStatuses = new Set([204, 205, 304])

/**
 * The response an error thrown by an attempt function carries, if it carries one, in the
 * shapes of the table above: a `Response` (thrown, or on `error.response`) with a non-2xx
 * status, as it is while its body is unread; otherwise a response built from a numeric status
 * (300–599) on `status`, `statusCode`, `response.status` or `response.statusCode`, with the
 * headers and the body found beside it. `undefined` for any other throw (a connection failure),
 * and for an error whose fields throw when read.
 */
export function responseOfThrown(error: unknown): Response | undefined {
  try {
    if (error instanceof Response) return fromResponse(error, undefined)
    if (typeof error !== 'object' || error === null) return undefined
    const thrown = error as ThrownShape
    const response = thrown.response
    if (response instanceof Response) {
      return fromResponse(response, thrown.data ?? (response as { data?: unknown }).data)
    }
    const inner =
      typeof response === 'object' && response !== null ? (response as ThrownShape) : undefined
    const status =
      statusOf(thrown.status) ??
      statusOf(thrown.statusCode) ??
      statusOf(inner?.status) ??
      statusOf(inner?.statusCode)
    if (status === undefined) return undefined
    const headers = headersOf(thrown.headers ?? inner?.headers)
    const body = nullBodyStatuses.has(status)
      ? undefined
      : bodyOf(
          inner?.data ?? (inner as { body?: unknown } | undefined)?.body ?? thrown.data,
          headers,
        )
    return new Response(body ?? null, { status, headers })
  } catch {
    // A getter that throws, a status `Response` refuses: no upstream verdict to read.
    return undefined
  }
}

/** A thrown `Response` as the answer: itself while its body is unread, else its status, headers and `data`. */
function fromResponse(response: Response, data: unknown): Response | undefined {
  if (response.ok) {
    // A 2xx the helper refused for its own reason: no upstream verdict, and its body is released.
    if (!response.bodyUsed) void response.body?.cancel().catch(() => {})
    return undefined
  }
  if (statusOf(response.status) === undefined) return undefined
  if (!response.bodyUsed) return response
  const headers = new Headers(response.headers)
  const body = nullBodyStatuses.has(response.status) ? undefined : bodyOf(data, headers)
  return new Response(body ?? null, { status: response.status, headers })
}

/**
 * A body a library kept beside its error: text or bytes as they are, a parsed JSON value as
 * JSON again (and said to be JSON when the headers say nothing).
 */
function bodyOf(value: unknown, headers: Headers): BodyInit | undefined {
  if (typeof value === 'string') return value
  if (value instanceof Uint8Array) return value as Uint8Array<ArrayBuffer>
  if (value instanceof ArrayBuffer) return value
  if (typeof value !== 'object' || value === null) return undefined
  let text: string | undefined
  try {
    text = JSON.stringify(value)
  } catch {
    return undefined
  }
  if (text !== undefined && !headers.has('content-type'))
    headers.set('content-type', 'application/json')
  return text
}

/**
 * Headers in any shape a library keeps them: a `Headers`, a list of pairs (or an iterable
 * of them, as axios's `AxiosHeaders`), or a plain record whose values are strings, numbers or
 * lists (Node's `IncomingMessage.headers`). A header that cannot be carried is left out.
 */
function headersOf(value: unknown): Headers {
  if (value instanceof Headers) return new Headers(value)
  const headers = new Headers()
  if (typeof value !== 'object' || value === null) return headers
  const entries: Iterable<unknown> =
    Symbol.iterator in value ? (value as Iterable<unknown>) : Object.entries(value)
  for (const entry of entries) {
    if (!Array.isArray(entry)) continue
    const [name, raw] = entry as [unknown, unknown]
    for (const item of Array.isArray(raw) ? raw : [raw]) {
      if (typeof name !== 'string' || (typeof item !== 'string' && typeof item !== 'number'))
        continue
      try {
        headers.append(name, String(item))
      } catch {
        // A name or value HTTP cannot carry: the rest of the headers still count.
      }
    }
  }
  return headers
}
