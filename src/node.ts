/**
 * `stream-boundary/node`: a downstream sink over Node's `http.ServerResponse` (plain
 * `node:http`, Express, Fastify's `reply.raw`). The only `node:http` code in the package.
 *
 * @module
 */

import type { ServerResponse } from 'node:http'
import type { DownstreamSink } from './commit/gate.js'

/**
 * Wraps an `http.ServerResponse` as a {@link DownstreamSink}: `writeHead` + `flushHeaders`,
 * `write` honouring `drain`, `end`, `destroy`, and the response's `close` before it finished
 * as the client-gone signal.
 *
 * @example
 * http.createServer(async (req, res) => {
 *   await relay({ sink: nodeSink(res), attempt, pool, adapter: openaiChat })
 * })
 */
export function nodeSink(res: ServerResponse): DownstreamSink {
  const gone = new AbortController()
  const onClose = () => {
    if (!res.writableFinished) gone.abort(new Error('the client closed the connection'))
  }
  res.once('close', onClose)

  function waitFor(event: 'drain' | 'finish'): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const done = (error?: unknown) => {
        res.off(event, onEvent)
        res.off('close', onGone)
        res.off('error', onError)
        if (error === undefined) resolve()
        else reject(error)
      }
      const onEvent = () => done()
      const onGone = () =>
        done(
          event === 'finish' && res.writableFinished
            ? undefined
            : new Error('the client closed the connection'),
        )
      const onError = (error: Error) => done(error)
      res.once(event, onEvent)
      res.once('close', onGone)
      res.once('error', onError)
    })
  }

  return {
    signal: gone.signal,
    sendHead(status, headers) {
      const plain: Record<string, string> = {}
      for (const [name, value] of headers) plain[name] = value
      res.writeHead(status, plain)
      res.flushHeaders()
    },
    write(chunk) {
      if (res.destroyed || res.writableEnded)
        return Promise.reject(new Error('the response is closed'))
      if (res.write(chunk)) return
      return waitFor('drain')
    },
    flush() {
      // Compression middleware adds flush(); plain responses write through.
      ;(res as ServerResponse & { flush?: () => void }).flush?.()
    },
    close() {
      if (res.writableEnded) return
      const finished = waitFor('finish')
      res.end()
      return finished
    },
    abort(reason) {
      res.off('close', onClose)
      if (!res.destroyed) res.destroy(reason instanceof Error ? reason : undefined)
    },
  }
}
