/**
 * The memory pool's wait queue: acquires waiting for a key at its in-flight cap (or, under
 * `headroom`, for the first refill of a key predicted out), first come, first served, woken
 * by the report that frees capacity (no polling).
 *
 * @module
 */

import { maxTimerDelayMs } from '../options.js'
import type { AcquireOptions, AcquireResult } from './types.js'

interface Waiter {
  readonly options: AcquireOptions
  readonly settle: (result: AcquireResult) => void
}

/**
 * An acquire's answer, and when it is `busy` because every free key is predicted out under
 * `headroom`: how long until the first refills (the longest the acquire waits for it).
 */
export type Decision = readonly [result: AcquireResult, refillInMs?: number]

/** Decides an acquire now. */
export type Decide = (options: AcquireOptions) => Decision

/** The tokens an acquire states it needs (0 when it states none usable). */
function tokensStated(options: AcquireOptions): number {
  const tokens = options.cost?.tokens
  return typeof tokens === 'number' && Number.isFinite(tokens) && tokens > 0 ? tokens : 0
}

/** Requests waiting at the in-flight cap, first come, first served, woken by releases. */
export class WaitQueue {
  readonly #waiters: Waiter[] = []

  get length(): number {
    return this.#waiters.length
  }

  /**
   * Hands freed capacity to queued waiters in order; settles those no longer busy. Once a
   * waiter that excludes no key found every key busy (or predicted out for its tokens), a
   * later one that excludes none and states at least as many tokens would too: it is not
   * asked again in this pass, so a long queue costs one look at the keys, not one per waiter.
   */
  serve(decide: Decide): void {
    const waiters = this.#waiters
    let busyFrom = Number.POSITIVE_INFINITY
    for (let i = 0; i < waiters.length; ) {
      const waiter = waiters[i] as Waiter
      const open = !(waiter.options.exclude !== undefined && waiter.options.exclude.size > 0)
      const tokens = tokensStated(waiter.options)
      if (open && tokens >= busyFrom) {
        i++
        continue
      }
      const [result] = decide(waiter.options)
      if (result.kind === 'busy') {
        if (open) busyFrom = Math.min(busyFrom, tokens)
        i++
        continue
      }
      waiters.splice(i, 1)
      waiter.settle(result)
    }
  }

  /**
   * Waits up to `waitMs` (the caller's budget) for a release; a wait for a refill
   * (`refillInMs`, under `headroom`) looks again at the refill and, when the keys are still
   * predicted out (another waiter took the refill probe), waits on within the budget. At the
   * budget's end the answer is what the keys are then (`busy` again when still out).
   */
  wait(
    options: AcquireOptions,
    waitMs: number,
    refillInMs: number | undefined,
    decide: Decide,
  ): Promise<AcquireResult> {
    const { signal } = options
    const waiters = this.#waiters
    return new Promise<AcquireResult>((resolve, reject) => {
      let left = waitMs
      let timer: ReturnType<typeof setTimeout> | undefined
      const waiter: Waiter = {
        options,
        settle(result) {
          clearTimeout(timer)
          signal?.removeEventListener('abort', onAbort)
          resolve(result)
        },
      }
      const leave = () => {
        const index = waiters.indexOf(waiter)
        if (index >= 0) waiters.splice(index, 1)
      }
      const onAbort = () => {
        leave()
        clearTimeout(timer)
        reject(signal?.reason)
      }
      // Request-scoped: it holds the process while the caller waits, and is always cleared.
      // Past setTimeout's limit a delay fires at once: the longest wait is that limit.
      const arm = (refill: number | undefined) => {
        const delay = Math.min(left, refill ?? left, maxTimerDelayMs)
        left -= delay
        timer = setTimeout(() => {
          const [result, next] = decide(options)
          if (result.kind === 'busy' && left > 0) return arm(next)
          leave()
          waiter.settle(result)
        }, delay)
      }
      arm(refillInMs)
      signal?.addEventListener('abort', onAbort, { once: true })
      waiters.push(waiter)
    })
  }
}
