/**
 * The Redis key pool's one error: Redis did not answer (the pool then serves locally).
 *
 * @module
 */

import { isStreamBoundaryError, StreamBoundaryError } from '../errors.js'

/**
 * What the pool was doing when Redis failed it.
 *
 * @group Key pools
 */
export type RedisPoolOperation =
  | 'seed'
  | 'acquire'
  | 'commit'
  | 'report'
  | 'enable'
  | 'disable'
  | 'stats'
  | 'renew'
  | 'probe'
  | 'resync'

/**
 * Redis did not serve the key pool: a connection error, a reply later than
 * `commandTimeoutMs`, or an error reply. Handed to `onDegraded`, never thrown at a request.
 *
 * @group Errors
 */
export class RedisUnavailableError extends StreamBoundaryError {
  override readonly name = 'RedisUnavailableError' as const
  /** What the pool was doing. */
  readonly operation: RedisPoolOperation

  constructor(operation: RedisPoolOperation, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause)
    super('REDIS_UNAVAILABLE', `Redis did not serve the key pool (${operation}): ${reason}`, {
      cause,
    })
    this.operation = operation
  }
}

/**
 * True when `value` is a {@link RedisUnavailableError} (from any copy of the package).
 *
 * @group Errors
 */
export function isRedisUnavailableError(value: unknown): value is RedisUnavailableError {
  return isStreamBoundaryError(value) && value.code === 'REDIS_UNAVAILABLE'
}
