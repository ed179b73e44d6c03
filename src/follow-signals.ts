/**
 * Following several abort signals with one, as the library does inside a request.
 *
 * @module
 */

import { type SignalLike, Stop } from './stop.js'

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
