/**
 * The pump's clocks and stops: the watchdog (upstream idle, client write stall) and what
 * stops a pump (the client leaving, the host's signal, the watchdog).
 *
 * @module
 */

import { now } from '../call-safely.js'
import { isDownstreamClosedError, StreamTimeoutError } from '../errors.js'
import { TimerSlot } from '../peek/clock.js'
import { type SignalLike, Stop, stopOf } from '../stop.js'
import type { CommitGate } from './gate-options.js'
import type { normalizePumpPolicy } from './pump-policy.js'

/** While a write is blocked, the longest time between two looks at the client's progress. */
const maxLookMs = 1_000

/** What the watchdog can see of the client: the sink's counts, through the gate. */
export interface ClientProgress {
  /** Bytes the client has taken so far, or `undefined` when the sink cannot tell. */
  taken(): number | undefined
  /** When the sink saw that count reached (an event), or `undefined` when it cannot tell. */
  takenAt(): number | undefined
}

/**
 * The pump's two clocks on one referenced timer (invariants 12 and 14). Upstream silence
 * counts only while the pump is ready to read: time blocked on a write the client has not
 * taken is subtracted, and that time counts toward the write-stall bound instead. The stall
 * bound measures the client's progress when the sink can tell it: a blocked write is a stall
 * once the client took no byte for the bound since its last byte (or since the write
 * blocked, if later), however long the write itself waits. Progress is looked at from the
 * moment a write blocks and then every second (a quarter of the bound when that is shorter),
 * and stamped with when the sink saw it happen, else with the look that found it: the cut
 * comes within the bound and one look of the client's last byte. Without a count, the
 * write's own wait is the measure.
 */
export class Watchdog {
  readonly #idleMs: number
  readonly #stallMs: number
  readonly #onIdle: (error: StreamTimeoutError) => void
  /** Its timer: its own, or the attempt's first-output clock's taken over at commit. */
  readonly #slot: TimerSlot
  #stopped = false
  /** When the last frame other than a keep-alive arrived. */
  #lastActivity = now()
  /** Time blocked on writes since then. */
  #blockedMs = 0
  #writingSince: number | undefined
  #failWrite: ((reason: unknown) => void) | undefined
  /** Whether the blocked write may be ended by `interrupt` (a close may not). */
  #interruptible = true
  readonly #client: ClientProgress | undefined
  /** While a write is blocked: when the client was last seen taking bytes, and its count then. */
  #progressAt = 0
  #takenAt: number | undefined

  constructor(
    idleMs: number,
    stallMs: number,
    onIdle: (error: StreamTimeoutError) => void,
    client?: ClientProgress,
    timer?: TimerSlot,
  ) {
    this.#idleMs = idleMs
    this.#stallMs = stallMs
    this.#onIdle = onIdle
    this.#client = client
    this.#slot = timer ?? new TimerSlot()
    // A timer taken over stays when it falls due no later (a check firing early arms again).
    this.#arm(timer !== undefined)
  }

  /** A frame other than a keep-alive arrived: the upstream is alive. */
  activity(at: number): void {
    this.#lastActivity = at
    this.#blockedMs = 0
  }

  /** Ends a blocked write now (the host gave up): it rejects with `reason`. */
  interrupt(reason: unknown): void {
    if (this.#interruptible) this.#failWrite?.(reason)
  }

  /**
   * Waits for a write the client has not taken yet; rejects with `write-stall` past the bound.
   * With `interruptible: false` (the close after the answer's end) the host's signal does not
   * end the wait: only the client (the sink's own failure) or the stall bound can.
   */
  blocked(written: Promise<void>, interruptible = true): Promise<void> {
    this.#writingSince = now()
    this.#interruptible = interruptible
    this.#progressAt = this.#writingSince
    this.#takenAt = this.#client?.taken()
    // The first look comes within one look's time of the block, not at a timer armed before.
    this.#arm(true)
    // One promise per blocked write (not an `async` function's and its `await`'s too).
    return new Promise<void>((resolve, reject) => {
      let over = false
      const end = (): boolean => {
        if (over) return false
        over = true
        this.#blockedMs += now() - (this.#writingSince as number)
        this.#writingSince = undefined
        this.#failWrite = undefined
        this.#interruptible = true
        // The idle clock goes on from here, its deadline moved by the time spent blocked. The
        // armed timer stays when it fires no later than that (a check that fires early
        // re-arms): no new timer per blocked write.
        this.#arm(true)
        return true
      }
      this.#failWrite = (reason) => {
        if (end()) reject(reason)
      }
      written.then(
        () => {
          if (end()) resolve()
        },
        (error: unknown) => {
          if (end()) reject(error)
        },
      )
    })
  }

  stop(): void {
    this.#stopped = true
    this.#slot.clear()
  }

  /**
   * Re-arms lazily for the nearest bound that could fire; none when both are off. With
   * `keepEarlier`, a timer already due no later than that bound stays.
   */
  #arm(keepEarlier = false): void {
    if (this.#stopped) return
    const at = now()
    let delay: number
    if (this.#writingSince !== undefined) {
      delay = this.#stallMs - (at - this.#progressAt)
      // Progress is only seen when looked for: a look at least every second.
      if (this.#takenAt !== undefined) delay = Math.min(delay, this.#stallMs / 4, maxLookMs)
    } else {
      const quiet = at - this.#lastActivity - this.#blockedMs
      // Never sleep past a stall bound: a write may start blocking at any moment.
      delay = Math.min(this.#idleMs - quiet, this.#stallMs)
    }
    if (delay === Number.POSITIVE_INFINITY) return
    const due = at + Math.max(delay, 1)
    this.#slot.arm(due, due - at, this.#check, keepEarlier)
  }

  /**
   * When the progress a look at `at` found happened: the sink's own stamp when it saw the
   * count reached (an event between the last look and this one), else the look's time.
   */
  #progressTime(at: number): number {
    let stamp: number | undefined
    try {
      stamp = this.#client?.takenAt()
    } catch {
      // A sink's own code: a throw only means it cannot tell.
    }
    // A stamp at the previous look's own time (the byte came in the same tick as that look)
    // is the client's last byte all the same, not a reason to take this look's later time.
    return typeof stamp === 'number' && stamp >= this.#progressAt && stamp <= at ? stamp : at
  }

  readonly #check = (): void => {
    const at = now()
    if (this.#writingSince !== undefined) {
      const taken = this.#takenAt === undefined ? undefined : this.#client?.taken()
      if (taken !== undefined && taken > (this.#takenAt as number)) {
        this.#takenAt = taken
        this.#progressAt = this.#progressTime(at)
      }
      if (at - this.#progressAt >= this.#stallMs) {
        this.#failWrite?.(new StreamTimeoutError('write-stall', this.#stallMs))
        return
      }
    } else if (at - this.#lastActivity - this.#blockedMs >= this.#idleMs) {
      this.#onIdle(new StreamTimeoutError('idle', this.#idleMs))
      return
    }
    this.#arm()
  }
}

/** The write-stall error carried by a gate failure (the gate's own keep-alive stalled). */
export function stallOf(error: unknown): StreamTimeoutError | undefined {
  const found = isDownstreamClosedError(error) ? error.cause : error
  return found instanceof StreamTimeoutError && found.timeout === 'write-stall' ? found : undefined
}

/**
 * What stops a pump: the client leaving (the gate's signal), the host's signal, and the
 * watchdog's idle and write-stall clocks, all aborting `stop`. `release` stops the watchdog
 * and removes the listeners. With `timer` (the attempt's first-output clock's, handed over at
 * commit) the watchdog runs on it: one timer per attempt, not one per clock.
 */
export function watchPump(
  gate: CommitGate,
  signal: SignalLike | undefined,
  policy: ReturnType<typeof normalizePumpPolicy>,
  timer?: TimerSlot,
) {
  const stop = new Stop()
  const watchdog = new Watchdog(
    policy.idleTimeoutMs,
    policy.writeStallTimeoutMs,
    (error) => stop.abort(error),
    { taken: () => gate.bytesTaken, takenAt: () => gate.bytesTakenAt },
    timer,
  )
  const gone = stopOf(gate)
  const onGateAbort = () => stop.abort(gone.reason)
  const onHostAbort = () => {
    stop.abort(signal?.reason)
    // The host gave up: do not wait for a slow client to take a write first.
    watchdog.interrupt(signal?.reason)
  }
  // A relay with no host signal of its own passes the gate's: one listener then, the host's.
  const watched: (readonly [SignalLike | undefined, () => void])[] =
    signal === gone ? [] : [[gone, onGateAbort]]
  watched.push([signal, onHostAbort])
  for (const [target, listener] of watched) {
    if (target?.aborted) listener()
    else target?.addEventListener('abort', listener, { once: true })
  }
  return {
    stop,
    watchdog,
    release() {
      watchdog.stop()
      for (const [target, listener] of watched) target?.removeEventListener('abort', listener)
    },
  }
}
