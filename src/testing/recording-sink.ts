/**
 * A downstream sink that records everything written to it and can misbehave on cue: hold
 * writes (backpressure), fail a write, or have the client disconnect.
 *
 * @module
 */

import type { DownstreamSink } from '../commit/gate-options.js'
import { joinBytes } from '../protocols/bytes.js'

/**
 * One thing that happened to a {@link RecordingSink}.
 *
 * @group Test doubles
 */
export type SinkEvent =
  | { readonly type: 'head'; readonly status: number; readonly headers: Headers }
  | { readonly type: 'write'; readonly bytes: Uint8Array }
  | { readonly type: 'close' }
  | { readonly type: 'abort'; readonly reason: unknown }

/**
 * A {@link DownstreamSink} for tests.
 *
 * @group Test doubles
 */
export interface RecordingSink extends DownstreamSink {
  /** Everything that happened, in order. */
  readonly events: readonly SinkEvent[]
  /** The status sent, if any. */
  readonly status: number | undefined
  /** All written bytes as text. */
  readonly text: string
  /** All written bytes. */
  readonly bytes: Uint8Array
  /** The client goes away. */
  disconnect(reason?: unknown): void
  /** Writes after the first `count` successful ones fail with `error`. */
  failWritesAfter(count: number, error?: unknown): void
  /** Holds every write until the returned function is called (backpressure). */
  holdWrites(): () => void
}

const decoder = new TextDecoder()

/**
 * Creates a {@link RecordingSink}.
 *
 * @group Test doubles
 */
export function createRecordingSink(): RecordingSink {
  const events: SinkEvent[] = []
  const gone = new AbortController()
  let okWrites = Number.POSITIVE_INFINITY
  let writeError: unknown
  let hold: Promise<void> | undefined
  const chunks = () => events.flatMap((event) => (event.type === 'write' ? [event.bytes] : []))
  return {
    signal: gone.signal,
    get events() {
      return events
    },
    get status() {
      const head = events.find((event) => event.type === 'head')
      return head?.type === 'head' ? head.status : undefined
    },
    get bytes() {
      const parts = chunks()
      return parts.length === 0 ? new Uint8Array(0) : joinBytes(parts)
    },
    get text() {
      return decoder.decode(this.bytes)
    },
    sendHead(status, headers) {
      events.push({ type: 'head', status, headers: new Headers(headers) })
    },
    async write(bytes) {
      if (hold !== undefined) await hold
      if (gone.signal.aborted) throw gone.signal.reason
      if (okWrites <= 0) throw writeError
      okWrites--
      events.push({ type: 'write', bytes: bytes.slice() })
    },
    close() {
      events.push({ type: 'close' })
    },
    abort(reason) {
      events.push({ type: 'abort', reason })
    },
    disconnect(reason) {
      gone.abort(reason ?? new Error('client disconnected'))
    },
    failWritesAfter(count, error = new Error('write EPIPE')) {
      okWrites = count
      writeError = error
    },
    holdWrites() {
      let release!: () => void
      hold = new Promise<void>((resolve) => {
        release = resolve
      })
      return () => {
        hold = undefined
        release()
      }
    },
  }
}
