/**
 * The types of a failed attempt and of what follows from it (`FailureVerdict`): what every
 * layer of the relay passes around. `decisions/classify.ts` makes them.
 *
 * @module
 */

import type { KeyOutcome } from '../../key-pool/types.js'
import type { PeekOutcome } from '../../peek/index.js'
import type { RenderableError, UpstreamErrorInfo } from '../../protocols/types.js'

/**
 * A failed attempt, as the relay saw it.
 *
 * @group Retry decisions
 */
export type AttemptFailure =
  /** The upstream answered with a non-2xx status. */
  | {
      readonly kind: 'status'
      readonly status: number
      readonly headers: Headers
      /** The error the body held, if it could be read. */
      readonly error?: UpstreamErrorInfo | undefined
    }
  /**
   * A 2xx that is not an event stream: an HTML or text page from a proxy, or a JSON error,
   * served as success. The upstream's fault, never the client's.
   */
  | {
      readonly kind: 'not-sse'
      readonly status: number
      readonly contentType: string | null
      readonly error?: UpstreamErrorInfo | undefined
      /** The response's headers: a rate limit stated in the body is timed by them. */
      readonly headers?: Headers | undefined
    }
  /** `fetch` threw: connection refused, reset, DNS, TLS. */
  | { readonly kind: 'connection'; readonly error: unknown }
  /** The stream opened but peek found no output. */
  | { readonly kind: 'peek'; readonly outcome: Exclude<PeekOutcome, { kind: 'output' }> }

/**
 * Why an attempt failed, or why the request gave up without one: a closed set, the HTTP
 * status, connection code or error type carried in the template parts. A request the
 * relay's `adjustRequest` or context-window fit changed says so with `:request-adjusted`.
 *
 * @group Retry decisions
 */
export type BaseFailureReason =
  | `status-${number}`
  | `redirect-${number}`
  | `connection-${string}`
  | 'connection-error'
  | `error-frame:${string}`
  | 'malformed-frame'
  | 'not-sse'
  | 'empty'
  | 'thinking-only'
  | 'first-byte-timeout'
  | 'first-output-timeout'
  | 'silence-timeout'
  | 'peek-overflow'
  | 'read-error'
  | 'answer-too-large'
  | 'fallback-timeout'
  | 'deadline'
  | 'streaming-unsupported'
  | 'invalid-attempt-result'
  | 'request-not-sent'
  | 'client-gone'
  | 'hedge-lost'
  | 'all-keys-busy'
  | 'all-keys-rate-limited'
  | 'all-keys-cooling'
  | 'all-keys-rejected'
  | `no-key:${'no-keys' | 'all-disabled' | 'all-excluded'}`

/**
 * A {@link BaseFailureReason}, or one for a request the relay changed and tried again.
 *
 * @group Retry decisions
 */
export type FailureReason = BaseFailureReason | `${BaseFailureReason}:request-adjusted`

/**
 * What follows from a failed attempt.
 *
 * @group Retry decisions
 */
export interface FailureVerdict {
  /** Whether another attempt may succeed. */
  readonly retryable: boolean
  /** What the key pool is told. */
  readonly key: KeyOutcome
  /** A short stable reason: `status-429`, `empty`, `first-output-timeout`, `error-frame:…`… */
  readonly reason: FailureReason
  /** Counts toward the route's consecutive-overload budget (429, 529, overload frames). */
  readonly overload: boolean
  /** The status to answer with if no attempt succeeds. */
  readonly status: number
  /** The error the client gets if no attempt succeeds (sanitised). */
  readonly error: RenderableError
  /** When the upstream said how long to wait. */
  readonly retryAfterMs?: number | undefined
  /**
   * How soon a retry may follow. `at-once` for a fault that says nothing about load (an
   * empty stream or answer, a cut or a retryable non-overload error frame before output, a
   * reset before any response): another key at once, or the same key after a short jittered
   * pause. Anything else (429, 503, 529, overload, refused connections, timeouts, other 5xx)
   * backs off.
   * @default 'backoff'
   */
  readonly recovery?: 'at-once' | 'backoff' | undefined
  /**
   * The attempt died of a reset or a broken pipe before any response: a pooled keep-alive
   * connection may be stale, so the next attempt asks for a fresh one.
   */
  readonly staleConnection?: boolean | undefined
}
