/**
 * Following several abort signals with one, as the library does inside a request.
 *
 * @module
 */

/**
 * A controller that aborts when any of `signals` does, with its reason. Unlike `AbortSignal.any`
 * on Node 20, nothing stays attached to a long-lived caller signal after `release()`, so a
 * host signal shared by every request does not collect listeners. A signal given twice is
 * listened to once.
 */
export function followSignals(signals: readonly (AbortSignal | undefined)[]): {
  readonly controller: AbortController
  release(): void
} {
  const controller = new AbortController()
  const onAbort = (event: Event) => controller.abort((event.target as AbortSignal).reason)
  const attached: AbortSignal[] = []
  for (const signal of signals) {
    if (signal === undefined || controller.signal.aborted || attached.includes(signal)) continue
    if (signal.aborted) controller.abort(signal.reason)
    else {
      signal.addEventListener('abort', onAbort, { once: true })
      attached.push(signal)
    }
  }
  return {
    controller,
    release() {
      for (const signal of attached) signal.removeEventListener('abort', onAbort)
    },
  }
}
