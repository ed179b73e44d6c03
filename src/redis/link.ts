/**
 * The pool's connection to Redis (every command bounded, failing fast while down) and what
 * this replica last heard of each key.
 *
 * @module
 */

import { outcomeKinds, tellKeyState } from '../key-pool/outcomes.js'
import type { KeyPoolSnapshot, KeyStateEvent, KeyStateSnapshot } from '../key-pool/types.js'
import {
  isRedisUnavailableError,
  type RedisPoolOperation,
  RedisUnavailableError,
} from './errors.js'
import {
  commandNames,
  decode,
  downStatuses,
  type EventRows,
  type Known,
  maxDelay,
  type Row,
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

/** What this replica last heard from Redis of each key: its snapshot and stats. */
export class KnownKeys {
  constructor(
    readonly states: Known[],
    readonly ids: readonly string[],
    readonly onKeyState: ((event: KeyStateEvent) => void) | undefined,
  ) {}

  learn(index: number, row: Row): void {
    const state = this.states[index]
    if (state === undefined) return
    state.disabled = row[0] === 1
    state.cooldownUntil = Number(row[1])
    state.failures = row[2]
    state.circuit = row[3]
    state.circuitUntil = Number(row[4])
    state.leases = row[6]
    state.disabledUntil = Number(row[7])
    const counts = row[8]
    if (counts !== undefined) {
      outcomeKinds.forEach((kind, j) => {
        state.outcomes[kind] = counts[j] ?? 0
      })
    }
  }

  learnAll(rows: readonly Row[]): void {
    for (const [index, row] of rows.entries()) this.learn(index, row)
  }

  snapshot(): KeyPoolSnapshot {
    return {
      version: 1,
      keys: this.states.map(
        (state, index): KeyStateSnapshot => ({
          id: this.ids[index] as string,
          disabled: state.disabled,
          disabledUntil: state.disabledUntil,
          cooldownUntil: state.cooldownUntil,
          failures: state.failures,
          circuit: state.circuit,
          circuitUntil: state.circuitUntil,
        }),
      ),
    }
  }

  /** Tells `onKeyState` what a script changed. */
  tellEvents(events: EventRows | undefined, index?: number): void {
    if (!Array.isArray(events)) return
    for (const [i, state, reason, until] of events) {
      const keyId = this.ids[index ?? i - 1]
      if (keyId === undefined) continue
      tellKeyState(this.onKeyState, {
        keyId,
        state,
        reason,
        ...(until === '' ? {} : { until: Number(until) }),
      })
    }
  }
}
