/**
 * The upstream answer an attempt function threw instead of returning: many gateways' HTTP
 * helpers throw on a 4xx/5xx with the response (or its status) on the error. Judged as that
 * response, a 404 stays a 404 and a 429 a rate limit, not a connection failure to retry.
 */

/**
 * The response an error thrown by an attempt function carries, if it carries one: its
 * `response` when that is a `Response` with a non-2xx status, else a body-less response
 * built from a numeric `status` (300–599) and its `headers` when they are a `Headers`, a
 * list of pairs or a plain object. `undefined` for any other throw (a connection failure).
 */
export function responseOfThrown(error: unknown): Response | undefined {
  if (typeof error !== 'object' || error === null) return undefined
  const { response, status, headers } = error as {
    response?: unknown
    status?: unknown
    headers?: unknown
  }
  if (response instanceof Response) {
    if (response.ok) {
      // A 2xx the helper refused for its own reason: no upstream verdict, and its body is released.
      if (!response.bodyUsed) void response.body?.cancel().catch(() => {})
      return undefined
    }
    if (!response.bodyUsed) return response
    return new Response(null, { status: response.status, headers: response.headers })
  }
  if (typeof status !== 'number' || !Number.isInteger(status) || status < 300 || status > 599) {
    return undefined
  }
  return new Response(null, { status, headers: headersOf(headers) })
}

function headersOf(value: unknown): Headers {
  try {
    return new Headers(value as HeadersInit | undefined)
  } catch {
    // A shape `Headers` does not take: the status alone is still the upstream's answer.
    return new Headers()
  }
}
