/**
 * The pool's connection to Redis: every command bounded by `commandTimeoutMs`, failing fast
 * while down.
 *
 * @module
 */

import {
  isRedisUnavailableError,
  type RedisPoolOperation,
  RedisUnavailableError,
} from './errors.js'
import {
  commandNames,
  decode,
  downStatuses,
  maxDelay,
  type ScriptClient,
  type ScriptMethod,
  type ScriptName,
} from './replies.js'

/** The pool's connection to Redis: every command bounded by `commandTimeoutMs`, failing fast while down. */
export class RedisLink {
  constructor(
    readonly client: ScriptClient,
    readonly commandTimeoutMs: number,
  ) {}

  /** Resolves once the client is `ready`; false when it was not within `commandTimeoutMs`. */
  connection(): Promise<boolean> {
    if (this.client.status === 'ready') return Promise.resolve(true)
    return new Promise<boolean>((resolve) => {
      const onReady = () => {
        clearTimeout(timer)
        resolve(true)
      }
      const timer = setTimeout(
        () => {
          this.client.off('ready', onReady)
          resolve(false)
        },
        Math.min(this.commandTimeoutMs, maxDelay),
      )
      this.client.once('ready', onReady)
    })
  }

  run<T>(operation: RedisPoolOperation, send: () => Promise<T>): Promise<T> {
    // Fail at once rather than queue behind a connection that is down.
    if (downStatuses.has(this.client.status)) {
      return Promise.reject(
        new RedisUnavailableError(operation, new Error(`the connection is ${this.client.status}`)),
      )
    }
    // Still connecting (a pool used at start-up): wait for it rather than go local at once.
    if (this.client.status !== 'ready') {
      return this.connection().then((ready) => {
        if (ready) return this.run(operation, send)
        throw new RedisUnavailableError(
          operation,
          new Error(`the connection was not ready within ${this.commandTimeoutMs} ms`),
        )
      })
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => {
          reject(
            new RedisUnavailableError(
              operation,
              new Error(`no reply within ${this.commandTimeoutMs} ms`),
            ),
          )
        },
        Math.min(this.commandTimeoutMs, maxDelay),
      )
      // Only housekeeping lets the process exit; a request's own call holds it.
      if (operation === 'renew' || operation === 'probe') {
        ;(timer as { unref?: () => void }).unref?.()
      }
      new Promise<T>((sent) => sent(send())).then(
        (value) => {
          clearTimeout(timer)
          resolve(value)
        },
        (error: unknown) => {
          clearTimeout(timer)
          reject(new RedisUnavailableError(operation, error))
        },
      )
    })
  }

  script<T>(
    operation: RedisPoolOperation,
    name: ScriptName,
    scriptKeys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<T> {
    return this.run(operation, async () => {
      const method = (this.client as unknown as Record<string, ScriptMethod>)[commandNames[name]]
      if (method === undefined) throw new TypeError(`The ${name} script is not defined`)
      return decode<T>(await method.call(this.client, scriptKeys.length, ...scriptKeys, ...args))
    })
  }

  asUnavailable(error: unknown, operation: RedisPoolOperation): RedisUnavailableError {
    return isRedisUnavailableError(error) ? error : new RedisUnavailableError(operation, error)
  }
}
