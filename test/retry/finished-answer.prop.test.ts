import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  type DownstreamSink,
  openaiChat,
  relay,
  webSink,
} from '../../src/index.js'
import { finish, role, text } from '../support/chat-frames.js'
import { runs } from '../support/runs.js'

/**
 * Invariant 22, over random answers and random moments of the host's abort: `outcome.ok` is
 * true exactly when the client read the whole answer, and the key is credited with a success
 * exactly then. An abort that lands after the sink took the answer's last bytes never undoes
 * it; one that lands before never passes for a whole answer.
 */

const encoder = new TextEncoder()

/** The upstream: the frames in chunks of `perChunk`, one chunk per pull; EOF with the last or after a pause. */
function upstream(frames: readonly string[], perChunk: number, eofLater: boolean): Response {
  const chunks: string[] = []
  for (let index = 0; index < frames.length; index += perChunk) {
    chunks.push(frames.slice(index, index + perChunk).join(''))
  }
  let next = 0
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const chunk = chunks[next++]
      if (chunk !== undefined) {
        controller.enqueue(encoder.encode(chunk))
        if (next < chunks.length || eofLater) return
      } else await new Promise((resolve) => setTimeout(resolve, 2))
      controller.close()
    },
  })
  return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
}

type Phase = 'sync' | 'microtask' | 'immediate'

/** The sink, counting its events (a write called, a write taken, close called, close resolved). */
function counted(sink: DownstreamSink, at: number, phase: Phase, abort: () => void) {
  let events = 0
  const event = () => {
    if (events++ !== at) return
    if (phase === 'sync') abort()
    else if (phase === 'microtask') queueMicrotask(abort)
    else setImmediate(abort)
  }
  const wrapped: DownstreamSink = {
    get signal() {
      return sink.signal
    },
    sendHead: (status, headers) => sink.sendHead(status, headers),
    abort: (reason) => sink.abort(reason),
    write(bytes) {
      event()
      const written = sink.write(bytes)
      if (written === undefined) {
        event()
        return undefined
      }
      return written.then(event)
    },
    close() {
      event()
      const closed = sink.close()
      if (closed === undefined) {
        event()
        return undefined
      }
      return closed.then(event)
    },
  }
  return { sink: wrapped, fired: () => events > at }
}

describe('a finished answer is a success (invariant 22)', () => {
  it('outcome.ok and the key’s success are true exactly when the client read the whole answer, wherever the host’s abort lands', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 1, max: 3 }),
        fc.boolean(),
        fc.nat({ max: 16 }),
        fc.constantFrom<Phase>('sync', 'microtask', 'immediate'),
        async (texts, perChunk, eofLater, at, phase) => {
          const frames = [role, ...Array.from({ length: texts }, (_, i) => text(`t${i}`)), finish]
          const pool = createMemoryKeyPool([{ id: 'a', secret: 'sk-prop-finished-123456' }])
          const host = new AbortController()
          const web = webSink()
          const { sink, fired } = counted(web.sink, at, phase, () => host.abort())
          const read = web.response.then(
            (response) => response.text(),
            () => null,
          )
          const outcome = await relay({
            sink,
            pool,
            adapter: openaiChat,
            signal: host.signal,
            attempt: async () => upstream(frames, perChunk, eofLater),
          })
          // An abort that never landed during the request lands now, after relay() resolved.
          if (!fired()) host.abort()
          const got = await read.catch(() => null)
          const whole = got?.includes('data: [DONE]') === true
          expect(outcome.ok).toBe(whole)
          const [stats] = await pool.stats()
          expect(stats?.outcomes.success).toBe(outcome.ok ? 1 : 0)
          expect(stats?.inflight).toBe(0)
        },
      ),
      { numRuns: runs(40) },
    )
  })
})
