/**
 * {@link Stop}, an abort the library makes for itself without an `AbortController`. A subpath
 * entry (`./node`) carries its own copy of this module: nothing checks a stop with
 * `instanceof`, and the module holds no state, so two copies cannot disagree.
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
 * An abort the library makes and listens to itself: a flag, a reason and an array of
 * callbacks, where an `AbortController` and the listeners on its signal cost the relay about
 * a fifth of its fixed CPU per request (docs/performance.md, "Stop or AbortSignal"). It has the part of
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
 * Where an object the library made (a commit gate, `nodeSink`, `webSink`) keeps the
 * {@link Stop} its public `signal` is made from (`Symbol.for`: two copies of the package
 * agree).
 */
export const ownStop = Symbol.for('stream-boundary.ownStop')

/**
 * What aborts with `owner.signal`, for listeners inside the library: the owner's own
 * {@link Stop} when the library made it (so no `AbortSignal` is made unless a host asks for
 * `signal`), else its `signal`.
 */
export function stopOf(owner: { readonly signal: AbortSignal }): SignalLike {
  return (owner as { readonly [ownStop]?: SignalLike })[ownStop] ?? owner.signal
}

/**
 * A real `AbortSignal` for `signal`, to hand out of the library (a frame reader it did not
 * make): a {@link Stop}'s own, made on demand; a real signal as it is.
 */
export function realSignal(signal: SignalLike): AbortSignal {
  // Not `instanceof Stop`: the `./node` entry carries its own copy of the class.
  return signal instanceof AbortSignal ? signal : (signal as Stop).real
}
