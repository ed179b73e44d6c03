/**
 * Which upstream response headers may be passed on to the client: request ids and rate-limit
 * information yes; hop-by-hop headers, framing, encoding and cookies never.
 *
 * @module
 */

const dropped = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'content-encoding',
  'content-type',
  'set-cookie',
  'alt-svc',
  'server',
  'date',
  'cache-control',
  'x-accel-buffering',
])

/**
 * The upstream headers worth passing on: everything but hop-by-hop headers (including those
 * the upstream's own `connection` header names), framing, encoding, cookies and the headers
 * the gate sets itself.
 */
export function forwardableHeaders(headers: Headers): Headers {
  const named = new Set(
    (headers.get('connection') ?? '')
      .split(',')
      .map((name) => name.trim().toLowerCase())
      .filter((name) => name !== ''),
  )
  const out = new Headers()
  for (const [name, value] of headers) {
    if (!dropped.has(name) && !named.has(name)) out.set(name, value)
  }
  return out
}
