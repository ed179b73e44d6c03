/**
 * The aborts a request is made of inside the library: following several signals with one,
 * and {@link Stop}, an abort the library makes for itself without an `AbortController`.
 *
 * @module
 */

/**
 * The part of `AbortSignal` the library listens to inside a request. A real `AbortSignal` is
 * one; so is a {@link Stop}. Listeners are called with no argument.
 */
export interface SignalLike {
  readonly aborted: boolean
  readonly reason: unknown
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void
  removeEventListener(type: 'abort', listener: () => void): void
}

/**
 * An abort the library makes and listens to itself. On Node 20 an `AbortController` costs
 * about 4 µs and every listener on its signal about 1 µs to add and remove, several times per
 * request; this is a flag, a reason and an array of callbacks. It has the part of
 * `AbortSignal` the library uses ({@link SignalLike}) and stands where a controller stood
 * (`signal` is itself). Where a real `AbortSignal` must leave the library (a frame reader it
 * did not make), {@link Stop.real} makes one that follows it, on demand.
 */
export class Stop implements SignalLike {
  aborted = false
  reason: unknown = undefined
  #listeners: (() => void)[] = []
  #real: AbortController | undefined

  /** This stop, where code expects a controller's `signal`. */
  get signal(): this {
    return this
  }

  /** A real `AbortSignal` that aborts with this stop (made on the first call). */
  get real(): AbortSignal {
    if (this.#real === undefined) {
      this.#real = new AbortController()
      if (this.aborted) this.#real.abort(this.reason)
    }
    return this.#real.signal
  }

  /**
   * Aborts once, with `reason` (an `AbortError` when none is given, as `AbortController`
   * does), and calls every listener in the order added. A listener that throws does not stop
   * the others; its error is rethrown in a microtask, as an event listener's would surface.
   */
  abort(reason?: unknown): void {
    if (this.aborted) return
    this.aborted = true
    this.reason =
      reason === undefined ? new DOMException('This operation was aborted', 'AbortError') : reason
    const listeners = this.#listeners
    this.#listeners = []
    this.#real?.abort(this.reason)
    for (const listener of listeners) {
      try {
        listener()
      } catch (error) {
        queueMicrotask(() => {
          throw error
        })
      }
    }
  }

  /** Adds `listener` (once; a second add of the same one is ignored, as on an `EventTarget`). */
  addEventListener(_type: 'abort', listener: () => void): void {
    if (this.aborted || this.#listeners.includes(listener)) return
    this.#listeners.push(listener)
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const index = this.#listeners.indexOf(listener)
    if (index !== -1) this.#listeners.splice(index, 1)
  }
}

/**
 * A real `AbortSignal` for `signal`, to hand out of the library (a frame reader it did not
 * make): a {@link Stop}'s own, made on demand; a real signal as it is.
 */
export function realSignal(signal: SignalLike): AbortSignal {
  return signal instanceof Stop ? signal.real : (signal as AbortSignal)
}

/**
 * Follows `signals` (any of them aborting aborts the result, with its reason) and lets them
 * go on `release()`: unlike `AbortSignal.any` on Node 20, nothing stays attached to a
 * long-lived caller signal, so a host signal shared by every request does not collect
 * listeners. A signal given twice is listened to once.
 */
function follow<T extends { readonly signal: SignalLike; abort(reason?: unknown): void }>(
  target: T,
  signals: readonly (SignalLike | undefined)[],
): { readonly controller: T; release(): void } {
  const attached: SignalLike[] = []
  const onAbort = () => {
    for (const signal of attached) {
      if (signal.aborted) {
        target.abort(signal.reason)
        return
      }
    }
  }
  for (const signal of signals) {
    if (signal === undefined || target.signal.aborted || attached.includes(signal)) continue
    if (signal.aborted) target.abort(signal.reason)
    else {
      signal.addEventListener('abort', onAbort, { once: true })
      attached.push(signal)
    }
  }
  return {
    controller: target,
    release() {
      for (const signal of attached) signal.removeEventListener('abort', onAbort)
    },
  }
}

/**
 * A controller that aborts when any of `signals` does, with its reason; `release()` removes
 * its listeners. For a real `AbortSignal` handed out of the library (a key pool's wait).
 */
export function followSignals(signals: readonly (SignalLike | undefined)[]): {
  readonly controller: AbortController
  release(): void
} {
  return follow(new AbortController(), signals)
}

/** {@link followSignals} as a {@link Stop}, for a signal only the library listens to. */
export function followStops(signals: readonly (SignalLike | undefined)[]): {
  readonly controller: Stop
  release(): void
} {
  return follow(new Stop(), signals)
}

/**
 * Where a sink made by the library keeps the {@link Stop} its public `signal` is made from
 * (`Symbol.for`: two copies of the package agree), so the gate listens to the stop and no
 * `AbortSignal` is made unless the host asks for `sink.signal`.
 */
export const sinkStop = Symbol.for('stream-boundary.sinkStop')

/** What aborts when the client of `sink` is gone: its library-made stop, else its signal. */
export function goneOf(sink: { readonly signal: AbortSignal }): SignalLike {
  return (sink as { readonly [sinkStop]?: SignalLike })[sinkStop] ?? sink.signal
}
