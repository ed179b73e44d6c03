/**
 * The first-byte and first-output bounds of one attempt on one timer, from the moment it is
 * sent to its first output: the send, an error body's read and the peek share it, so an
 * attempt sets one timer for both bounds instead of two per phase (docs/performance.md).
 *
 * @module
 */

import { now } from '../call-safely.js'
import { StreamTimeoutError } from '../errors.js'

/**
 * Fires `first-byte` when no byte arrived by its bound, `first-output` at its bound, once,
 * through `fire`. The timer is request-scoped and referenced (guarantee 12 in
 * docs/guarantees.md); `dispose()` clears it.
 */
export class FirstOutputClock {
  /** When the first-byte bound falls due (`now()` time); `Infinity` once it cannot fire. */
  #firstByteAt: number
  readonly #firstOutputAt: number
  readonly #firstByteMs: number
  readonly #firstOutputMs: number
  readonly #fire: (error: StreamTimeoutError) => void
  /** Whether a byte of the body arrived; none can before the body is read. */
  #byteArrived: () => boolean = () => false
  #timer: ReturnType<typeof setTimeout> | undefined
  #done = false

  constructor(
    startedAt: number,
    firstByteMs: number,
    firstOutputMs: number,
    fire: (error: StreamTimeoutError) => void,
  ) {
    this.#firstByteMs = firstByteMs
    this.#firstOutputMs = firstOutputMs
    this.#firstByteAt = startedAt + firstByteMs
    this.#firstOutputAt = startedAt + firstOutputMs
    this.#fire = fire
    this.#arm()
  }

  /** From now on a byte counts when `arrived()` says one did (the peek's reader). */
  watchBytes(arrived: () => boolean): void {
    this.#byteArrived = arrived
  }

  dispose(): void {
    this.#done = true
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
  }

  #arm(): void {
    const due = Math.min(this.#firstByteAt, this.#firstOutputAt)
    if (this.#done || due === Number.POSITIVE_INFINITY) return
    this.#timer = setTimeout(this.#check, Math.max(0, due - now()))
  }

  readonly #check = (): void => {
    this.#timer = undefined
    if (this.#done) return
    // A timer that ran a fraction early finds nothing due and is set again for the rest.
    const at = now()
    if (this.#firstByteAt <= at) {
      if (!this.#byteArrived()) {
        this.#end(new StreamTimeoutError('first-byte', this.#firstByteMs))
        return
      }
      this.#firstByteAt = Number.POSITIVE_INFINITY
    }
    if (this.#firstOutputAt <= at) {
      this.#end(new StreamTimeoutError('first-output', this.#firstOutputMs))
      return
    }
    this.#arm()
  }

  #end(error: StreamTimeoutError): void {
    this.#done = true
    this.#fire(error)
  }
}
