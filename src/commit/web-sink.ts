/**
 * A downstream sink that becomes a Web `Response` (Hono, Workers, Deno, Bun, Next route
 * handlers): the response resolves when headers commit, its body honours the consumer's
 * pull, and cancelling the body is the client-gone signal.
 *
 * @module
 */

import { positiveInteger, rejectUnknownKeys } from '../options.js'
import { ownStop, Stop } from '../stop.js'
import type { DownstreamSink } from './gate-options.js'
import { type PlainHeadSink, plainHead } from './head.js'

/**
 * Options of {@link webSink}.
 *
 * @group Downstream
 */
export interface WebSinkOptions {
  /**
   * Bytes the body may queue before `write` waits for the consumer to pull.
   * @default 65_536
   */
  highWaterMark?: number
}

/**
 * What {@link webSink} returns.
 *
 * @group Downstream
 */
export interface WebSink {
  /** Give this to `createCommitGate` (or `relay`). */
  readonly sink: DownstreamSink
  /** Resolves with the `Response` when headers commit; rejects if the sink is aborted first. */
  readonly response: Promise<Response>
}

/**
 * Creates a sink whose output is a Web `Response`.
 *
 * @example
 * app.post('/v1/chat/completions', async (c) => {
 *   const { sink, response } = webSink()
 *   void relay({ sink, attempt, pool, adapter: openaiChat, signal: c.req.raw.signal })
 *   return response
 * })
 *
 * @group Downstream
 */
export function webSink(options: WebSinkOptions = {}): WebSink {
  rejectUnknownKeys('webSink', options, ['highWaterMark'] satisfies (keyof WebSinkOptions)[])
  const highWaterMark = positiveInteger('highWaterMark', options.highWaterMark ?? 65_536)
  // The client-gone abort; `sink.signal` is made from it only when the host asks.
  const gone = new Stop()
  let controller!: ReadableStreamDefaultController<Uint8Array>
  let resolveResponse!: (response: Response) => void
  let rejectResponse!: (reason: unknown) => void
  const response = new Promise<Response>((resolve, reject) => {
    resolveResponse = resolve
    rejectResponse = (reason) => {
      reject(reason)
      // An unobserved rejection (the host never awaited the response) is not an error of its
      // own. Handled when it happens, not on every response (each promise costs a host
      // running async hooks): still in the same tick, before Node looks for unhandled ones.
      response.catch(() => {})
    }
  })
  let headSent = false
  let given = 0
  let closed = false
  let waiting: { resolve: () => void; reject: (reason: unknown) => void } | undefined
  let stampAt: number | undefined
  let stampTaken = 0
  // What the consumer pulled: the body's queue holds the rest (none once it is closed).
  const taken = () => {
    const desired = controller?.desiredSize ?? highWaterMark
    return closed && desired === 0 ? given : given - (highWaterMark - desired)
  }

  const body = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c
      },
      pull() {
        // The consumer took bytes: its progress, timed when it happened (`bytesTakenAt`).
        stampAt = performance.now()
        stampTaken = taken()
        waiting?.resolve()
        waiting = undefined
      },
      cancel(reason) {
        gone.abort(reason ?? new Error('the response body was cancelled'))
        waiting?.reject(gone.reason)
        waiting = undefined
      },
    },
    new ByteLengthQueuingStrategy({ highWaterMark }),
  )

  const sink: DownstreamSink & PlainHeadSink & { readonly [ownStop]: Stop } = {
    get signal() {
      return gone.real
    },
    [ownStop]: gone,
    sendHead(status, headers) {
      headSent = true
      resolveResponse(new Response(body, { status, headers }))
    },
    [plainHead](status, headers) {
      headSent = true
      resolveResponse(new Response(body, { status, headers }))
    },
    write(chunk) {
      if (gone.aborted) return Promise.reject(gone.reason)
      given += chunk.length
      controller.enqueue(chunk)
      if ((controller.desiredSize ?? 1) > 0) return
      return new Promise<void>((resolve, reject) => {
        waiting = { resolve, reject }
      })
    },
    close() {
      closed = true
      if (!gone.aborted) controller.close()
    },
    bytesTaken: taken,
    bytesTakenAt: () => (taken() === stampTaken ? stampAt : undefined),
    abort(reason) {
      if (!headSent) rejectResponse(reason)
      waiting?.reject(reason)
      waiting = undefined
      try {
        controller.error(reason)
      } catch {
        // Already closed or errored.
      }
    },
  }
  return { sink, response }
}
