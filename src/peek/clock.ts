/**
 * The first-byte and first-output bounds of one attempt on one timer, from the moment it is
 * sent to its first output: the send, an error body's read and the peek share it, so an
 * attempt sets one timer for both bounds instead of two per phase (docs/performance.md). At
 * commit the pump's watchdog takes that timer over ({@link TimerSlot}): one timer per attempt.
 *
 * @module
 */

import { now } from '../call-safely.js'
import { StreamTimeoutError } from '../errors.js'

/**
 * One referenced timer that clocks of one attempt hand on to each other: the first-output
 * clock's, taken over at commit by the pump's watchdog, so a request sets one timer where it
 * set one per clock. `arm` keeps the armed timer when it falls due no later than asked (its
 * owner's check, firing early, finds nothing due and arms again for the rest); a timer that
 * fires with no owner does nothing. `clear` ends it.
 */
export class TimerSlot {
  #timer: ReturnType<typeof setTimeout> | undefined
  /** When `#timer` fires (`now()` time). */
  #due = 0
  #fire: (() => void) | undefined

  /**
   * Calls `fire` at `due` (`now()` time, `delay` milliseconds from now), or earlier: with
   * `keepEarlier`, a timer already due no later stays (and now calls `fire`).
   */
  arm(due: number, delay: number, fire: () => void, keepEarlier: boolean): void {
    this.#fire = fire
    if (keepEarlier && this.#timer !== undefined && this.#due <= due) return
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#due = due
    this.#timer = setTimeout(this.#check, delay)
  }

  /** Its owner is done with it: the timer stays armed for the next owner, firing nothing meanwhile. */
  release(): void {
    this.#fire = undefined
  }

  clear(): void {
    this.#fire = undefined
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
  }

  readonly #check = (): void => {
    this.#timer = undefined
    const fire = this.#fire
    this.#fire = undefined
    fire?.()
  }
}

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
  /** Its timer: handed on to the pump's watchdog at commit ({@link FirstOutputClock.handOver}). */
  readonly #slot = new TimerSlot()
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

  /**
   * Stops the clock and clears its timer, whoever holds it now: the attempt disposes of its
   * clock when it ends, after the pump that took the timer over ended too.
   */
  dispose(): void {
    this.#done = true
    this.#slot.clear()
  }

  /**
   * Stops the clock and leaves its timer armed, firing nothing, for the pump's watchdog to
   * take over at commit (`timer`); `dispose()` still clears it.
   */
  handOver(): void {
    this.#done = true
    this.#slot.release()
  }

  /** The clock's timer, for the pump's watchdog to take over once the clock is handed over. */
  get timer(): TimerSlot {
    return this.#slot
  }

  #arm(): void {
    const due = Math.min(this.#firstByteAt, this.#firstOutputAt)
    if (this.#done || due === Number.POSITIVE_INFINITY) return
    this.#slot.arm(due, Math.max(0, due - now()), this.#check, false)
  }

  readonly #check = (): void => {
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
