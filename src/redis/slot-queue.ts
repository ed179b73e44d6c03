/**
 * This replica's queue of acquires waiting for a slot at the in-flight cap: first come, first
 * served, with only the head asking Redis.
 *
 * @module
 */

import type { AcquireOptions, AcquireResult } from '../key-pool/types.js'
import { maxTimerDelayMs } from '../options.js'

/** One acquire waiting in the queue. */
export interface RedisWaiter {
  /** Asks Redis again; `passOn` lets a waiter that excludes keys wake the next one. */
  attempt(passOn: boolean): void
}

/** The head's poll, doubling from this… */
const pollStartMs = 25
/** …up to this. */
const pollMaxMs = 100

/**
 * Waits in this replica's FIFO queue for a slot. Only the head asks Redis, on a backoff
 * poll (25 ms doubling to 100 ms: releases on other replicas are not announced) and at
 * once when a lease of this replica is reported; a head that gets a lease hands the turn
 * to the next waiter at once, since capacity may remain.
 */
export function waitForSlot(
  waiters: RedisWaiter[],
  acquireOnce: (options: AcquireOptions) => Promise<AcquireResult>,
  options: AcquireOptions,
  waitMs: number,
): Promise<AcquireResult> {
  const { signal } = options
  return new Promise<AcquireResult>((resolve, reject) => {
    let delay = pollStartMs
    let poll: ReturnType<typeof setTimeout> | undefined
    let running = false
    let rerun = false
    let timedOut = false
    let settled = false
    const settle = (finish: () => void) => {
      settled = true
      clearTimeout(poll)
      clearTimeout(deadline)
      signal?.removeEventListener('abort', onAbort)
      const index = waiters.indexOf(waiter)
      if (index >= 0) waiters.splice(index, 1)
      finish()
      if (index === 0) waiters[0]?.attempt(false)
    }
    const schedule = () => {
      if (settled || running || waiters[0] !== waiter) return
      clearTimeout(poll)
      // Request-scoped, like the deadline: it holds the process while the caller waits.
      poll = setTimeout(() => waiter.attempt(false), delay)
      delay = Math.min(delay * 2, pollMaxMs)
    }
    const settleWith = (result: AcquireResult, passOn: boolean) => {
      running = false
      if (settled) {
        // Aborted while Redis was answering: give the lease straight back.
        if (result.kind === 'leased') void result.lease.report({ kind: 'cancelled' })
        return
      }
      if (result.kind !== 'busy' || timedOut) return settle(() => resolve(result))
      if (rerun) {
        rerun = false
        return waiter.attempt(passOn)
      }
      // A waiter that excludes keys may have missed a slot the next one can take.
      if (passOn && (options.exclude?.size ?? 0) > 0) {
        waiters[waiters.indexOf(waiter) + 1]?.attempt(true)
      }
      schedule()
    }
    const waiter: RedisWaiter = {
      attempt(passOn) {
        if (settled) return
        if (running) {
          rerun = true
          return
        }
        running = true
        clearTimeout(poll)
        acquireOnce(options).then(
          (result) => settleWith(result, passOn),
          (error: unknown) => {
            running = false
            if (!settled) settle(() => reject(error))
          },
        )
      },
    }
    const onAbort = () => settle(() => reject(signal?.reason))
    // Past setTimeout's limit a delay fires at once: the longest wait is that limit.
    const deadline = setTimeout(
      () => {
        timedOut = true
        if (!running) waiter.attempt(false)
      },
      Math.min(waitMs, maxTimerDelayMs),
    )
    signal?.addEventListener('abort', onAbort, { once: true })
    waiters.push(waiter)
    schedule()
  })
}
