/**
 * The response head the gate sends, built as a plain record: the filtered upstream headers,
 * the SSE defaults, the host's. A sink that takes a record (`plainHead`: `nodeSink`,
 * `webSink`) gets it as it is; any other sink gets the `Headers` its contract names. No
 * `Headers` object per request on the hot path (docs/performance.md).
 *
 * @module
 */

/**
 * A sink's method that takes the head as a plain record of lower-case names. `Symbol.for`:
 * two copies of the package agree.
 */
export const plainHead = Symbol.for('stream-boundary.plainHead')

/** What a sink with {@link plainHead} has. */
export interface PlainHeadSink {
  [plainHead](status: number, headers: Record<string, string>): void | Promise<void>
}

/** SSE response headers the gate always sends (a host may override them). */
export const sseHeaders: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
})

/** Sets every header of `init` on `head` (names lower-cased, later ones winning), as `Headers.set` would. */
export function setEach(head: Record<string, string>, init: HeadersInit | undefined): void {
  if (init === undefined) return
  if (init instanceof Headers || Array.isArray(init)) {
    for (const pair of init as Iterable<readonly string[]>) {
      if (pair.length !== 2) throw new TypeError('a header pair must have a name and a value')
      head[(pair[0] as string).toLowerCase()] = String(pair[1]).trim()
    }
    return
  }
  const record = init as Record<string, string>
  for (const name of Object.keys(record)) head[name.toLowerCase()] = String(record[name]).trim()
}

/** Sends `head` through the sink's {@link plainHead} when it has one, else as `Headers`. */
export function sendHead(
  sink: { sendHead(status: number, headers: Headers): void | Promise<void> },
  status: number,
  head: Record<string, string>,
): void | Promise<void> {
  const plain = (sink as Partial<PlainHeadSink>)[plainHead]
  if (typeof plain === 'function') return plain.call(sink, status, head)
  return sink.sendHead(status, new Headers(head))
}
