/**
 * An abortable wait: rejects with `signal.reason` and removes its listener. The timer is
 * referenced: a request waits on it, so a script awaiting that request must not exit
 * mid-wait (guarantee 12 in docs/guarantees.md).
 *
 * @module
 */

import { maxTimerDelayMs } from '../../options.js'

/** Waits `ms` milliseconds unless `signal` aborts first. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason)
  if (!(ms > 0)) return Promise.resolve()
  return new Promise((resolve, reject) => {
    let timer: ReturnType<typeof setTimeout> | undefined
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    let left = ms
    // setTimeout fires at once past its maximum delay, so a longer wait runs in steps.
    const step = () => {
      if (left <= 0) {
        signal.removeEventListener('abort', onAbort)
        resolve()
        return
      }
      const delay = Math.min(left, maxTimerDelayMs)
      left -= delay
      timer = setTimeout(step, delay)
    }
    signal.addEventListener('abort', onAbort, { once: true })
    step()
  })
}
