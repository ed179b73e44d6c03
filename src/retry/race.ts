/**
 * Hedged attempts: while the running attempt shows no output, more attempts start on other
 * free keys (within the budget); the first to reach visible output claims the client and
 * every other one is cancelled at once. Nothing of a losing attempt is ever written: the
 * claim is decided synchronously, before the winner writes its first byte.
 *
 * @module
 */

import type { KeyLease, KeyPool } from '../key-pool/types.js'
import type { AttemptResult } from './attempt.js'
import {
  type HedgeState,
  hedgeBudgetLeft,
  hedgeDelay,
  hedgePaused,
  recordOverload,
  takeHedge,
} from './hedge.js'
import type { HedgeReport } from './outcome.js'
import { callHook, now, type RouteRun, type Run } from './run.js'
import { attemptOn, type Started } from './start.js'

interface Racer {
  readonly number: number
  readonly hedgeOf: number | undefined
  readonly lost: AbortController
  settled: boolean
  promise: Promise<{ racer: Racer; started: Started }>
}

/** What a race ended with: the winner's, or the last failure's, attempt. */
export interface RaceEnd extends Started {
  readonly keyId: string | null
  readonly hedges: HedgeReport
}

const lostReason = () => new Error('another attempt of the request answered first')

/** A referenced timer as a promise, cleared by the caller. */
function timer(ms: number): { promise: Promise<'hedge'>; clear(): void } {
  let handle: ReturnType<typeof setTimeout> | undefined
  const promise = new Promise<'hedge'>((resolve) => {
    if (Number.isFinite(ms)) handle = setTimeout(() => resolve('hedge'), ms)
  })
  return { promise, clear: () => clearTimeout(handle) }
}

/**
 * Runs the route's next stream attempt on `lease`, hedged per `state`. Resolves when the
 * winner's stream ended (every loser settled and its lease reported by then), or when every
 * attempt failed before output (with the last failure). A throw cancels every attempt
 * first.
 */
export async function raceAttempts(
  run: Run,
  route: RouteRun,
  lease: KeyLease,
  state: HedgeState,
): Promise<RaceEnd> {
  const pool = route.route.pool as KeyPool
  const { maxHedges } = state.options
  const racers: Racer[] = []
  const raceStarted = now()
  const delay = hedgeDelay(state, route.name)
  let winner: Racer | undefined
  let slots = 0
  let hedges = 0

  const start = (key: KeyLease, hedgeOf: number | undefined) => {
    const racer = {
      number: run.attemptNumber + 1,
      hedgeOf,
      lost: new AbortController(),
      settled: false,
    } as Racer
    const claim = () => {
      if (winner !== undefined) return false
      winner = racer
      for (const other of racers) if (other !== racer) other.lost.abort(lostReason())
      return true
    }
    racer.promise = attemptOn(run, route, key, 'stream', {
      lost: racer.lost.signal,
      claim,
      hedgeOf,
    }).then(
      (started) => {
        racer.settled = true
        return { racer, started }
      },
      (error: unknown) => {
        racer.settled = true
        throw error
      },
    )
    racers.push(racer)
  }

  const report = (): HedgeReport => {
    let cancelled = 0
    let cancelledMs = 0
    for (const record of run.attempts) {
      if (record.result !== 'hedge-lost') continue
      if (!racers.some((racer) => racer.number === record.attemptNumber)) continue
      cancelled++
      cancelledMs += record.durationMs
    }
    return { started: hedges, cancelled, cancelledMs, wonByHedge: winner?.hedgeOf !== undefined }
  }

  /** Starts a hedge when everything allows one now; a skipped slot is not retried. */
  const maybeHedge = async (running: readonly Racer[]) => {
    slots++
    const stopped = () => winner !== undefined || run.stop.aborted || run.deadline.aborted
    if (stopped() || running.length >= 1 + maxHedges) return
    if (route.overloads > 0 || hedgePaused(state, route.name) || !hedgeBudgetLeft(state)) return
    let got: Awaited<ReturnType<KeyPool['acquire']>>
    try {
      got = await pool.acquire({ exclude: route.tried })
    } catch {
      return // A hedge is optional: a pool that cannot answer now just means none.
    }
    if (got.kind !== 'leased') return
    if (stopped() || !takeHedge(state)) {
      await got.lease.report({ kind: 'cancelled' }).catch(() => {})
      return
    }
    hedges++
    const hedgeOf = (running.find((racer) => !racer.settled) ?? running[0] ?? racers[0]) as Racer
    callHook(run.hooks.onHedge, {
      attemptNumber: run.attemptNumber + 1,
      hedgeOf: hedgeOf.number,
      route: route.name,
      keyId: got.lease.keyId,
      afterMs: Math.round(now() - raceStarted),
    })
    start(got.lease, hedgeOf.number)
  }

  start(lease, undefined)
  let last: { racer: Racer; started: Started } | undefined
  try {
    for (;;) {
      const running = racers.filter((racer) => !racer.settled)
      if (running.length === 0) break
      const due =
        winner === undefined && hedges < maxHedges
          ? Math.max(0, raceStarted + (slots + 1) * delay - now())
          : Number.POSITIVE_INFINITY
      const wake = timer(due)
      let next: 'hedge' | { racer: Racer; started: Started }
      try {
        next = await Promise.race([...running.map((racer) => racer.promise), wake.promise])
      } finally {
        wake.clear()
      }
      if (next === 'hedge') {
        await maybeHedge(running)
        continue
      }
      last = next
      const { result } = next.started
      if (result.kind === 'committed' || result.stopped === 'hedge-lost') continue
      // A failure while another attempt still runs: the request goes on with the survivor.
      if (racers.some((racer) => !racer.settled)) noteFailure(run, route, result)
    }
  } catch (error) {
    for (const racer of racers) racer.lost.abort(lostReason())
    await Promise.allSettled(racers.map((racer) => racer.promise))
    throw error
  }
  const end = winner === undefined ? last : await winner.promise
  const started = (end as { started: Started }).started
  return {
    ...started,
    keyId: run.attempts[started.record]?.keyId ?? null,
    hedges: report(),
  }
}

/**
 * Brings the request's state up to date after a failed attempt: what the give-up would
 * say, the route's overload count, whether the next connection should be fresh, and the
 * hedging pause after an overload.
 */
export function noteFailure(
  run: Run,
  route: RouteRun,
  result: Extract<AttemptResult, { kind: 'failed' }>,
  verdict = result.verdict,
): void {
  if (result.stopped === undefined) {
    run.last = {
      verdict,
      adapter: route.route.adapter,
      upstream: result.upstream,
      pooled: route.route.pool !== undefined,
    }
  }
  route.overloads = verdict.overload ? route.overloads + 1 : 0
  if (verdict.overload && run.config.hedge !== undefined) {
    recordOverload(run.config.hedge, route.name)
  }
  run.freshConnection = /^connection-(?:ECONNRESET|EPIPE|UND_ERR_SOCKET)$/.test(verdict.reason)
}
