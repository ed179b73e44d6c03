/**
 * An abortable wait: rejects with `signal.reason`, removes its listener, and does not keep
 * the process alive.
 *
 * @module
 */

/** Waits `ms` milliseconds unless `signal` aborts first. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason)
  if (ms <= 0) return Promise.resolve()
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    ;(timer as { unref?: () => void }).unref?.()
    signal.addEventListener('abort', onAbort, { once: true })
  })
}
