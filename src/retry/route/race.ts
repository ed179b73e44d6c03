/**
 * Hedged attempts: while the running attempt shows no output, more attempts start on other
 * free keys (within the budget); the first to reach visible output claims the client and
 * every other one is cancelled at once. Nothing of a losing attempt is ever written: the
 * claim is decided synchronously, before the winner writes its first byte.
 *
 * @module
 */

import { now } from '../../call-safely.js'
import type { KeyLease } from '../../key-pool/types.js'
import { estimateRequestCost } from '../request/request-cost.js'
import type { HedgeState } from '../shared/hedging-types.js'
import { callHook } from '../shared/hooks.js'
import type { HedgeReport, HedgeSkipReason } from '../shared/outcome.js'
import { hedgeBudgetLeft, hedgeDelay, hedgePaused, takeHedge } from './hedge.js'
import { noteFailure, type RouteRun, type Run } from './run.js'
import { type Started, startAttempt } from './start.js'

interface Racer {
  readonly number: number
  readonly hedgeOf: number | undefined
  readonly lost: AbortController
  settled: boolean
  promise: Promise<Settled>
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

type Settled = { racer: Racer; started: Started }

/** One request's race on one route: the attempts running, the hedges started, the winner. */
class Race {
  readonly racers: Racer[] = []
  /** Settled attempts the race loop has not taken yet, in the order they settled. */
  readonly settled: Settled[] = []
  readonly started = now()
  readonly delay: number
  winner: Racer | undefined
  /** Hedge slots passed (a slot skipped for want of a key or budget is not retried). */
  slots = 0
  hedges = 0
  readonly skipped: Record<HedgeSkipReason, number> = { budget: 0, overload: 0, 'no-free-key': 0 }

  constructor(
    readonly run: Run,
    readonly route: RouteRun,
    readonly state: HedgeState,
  ) {
    this.delay = hedgeDelay(state, route.name)
  }

  running(): Racer[] {
    return this.racers.filter((racer) => !racer.settled)
  }

  /** Milliseconds until the next hedge slot, or `Infinity` when no more hedge can start. */
  nextSlotIn(): number {
    if (this.winner !== undefined || this.hedges >= this.state.options.maxHedges) {
      return Number.POSITIVE_INFINITY
    }
    return Math.max(0, this.started + (this.slots + 1) * this.delay - now())
  }

  /**
   * The first attempt to reach visible output wins the client, decided synchronously before
   * it writes anything; every other attempt is cancelled at once.
   */
  claim(racer: Racer): boolean {
    if (this.winner !== undefined) return false
    this.winner = racer
    for (const other of this.racers) if (other !== racer) other.lost.abort(lostReason())
    return true
  }

  start(lease: KeyLease | undefined, hedgeOf: number | undefined): void {
    const racer = {
      number: this.run.attemptNumber + 1,
      hedgeOf,
      lost: new AbortController(),
      settled: false,
    } as Racer
    const entry = { lost: racer.lost.signal, claim: () => this.claim(racer), hedgeOf }
    racer.promise = startAttempt(this.run, this.route, lease, 'stream', entry).then(
      (started) => {
        racer.settled = true
        const settled = { racer, started }
        this.settled.push(settled)
        return settled
      },
      (error: unknown) => {
        racer.settled = true
        throw error
      },
    )
    this.racers.push(racer)
  }

  #stopped(): boolean {
    return this.winner !== undefined || this.run.stop.aborted || this.run.deadline.aborted
  }

  /** A hedge slot passed without a hedge: counted, and told to `onHedgeSkipped`. */
  #skip(reason: HedgeSkipReason): void {
    this.skipped[reason]++
    callHook(this.run.hooks.onHedgeSkipped, {
      attemptNumber: this.run.attemptNumber,
      route: this.route.name,
      reason,
      afterMs: Math.round(now() - this.started),
    })
  }

  /**
   * The key for a hedge: a free key the request has not used; with `sameKey`, any free key,
   * or the caller's own credential when the route has no pool. `null` when none can be had.
   */
  async #hedgeKey(): Promise<{ lease: KeyLease | undefined } | null> {
    const pool = this.route.route.pool
    const { sameKey } = this.state.options
    if (pool === undefined) return sameKey ? { lease: undefined } : null
    try {
      const { tried, request } = this.route.progress
      const cost = estimateRequestCost(request)
      const other = await pool.acquire({ exclude: tried, cost })
      if (other.kind === 'leased') return { lease: other.lease }
      if (!sameKey) return null
      const any = await pool.acquire({ cost })
      return any.kind === 'leased' ? { lease: any.lease } : null
    } catch {
      return null // A hedge is optional: a pool that cannot answer now just means none.
    }
  }

  /** Starts a hedge when everything allows one now: no winner, the budget, a free key. */
  async maybeHedge(): Promise<void> {
    this.slots++
    const { run, route, state } = this
    const running = this.running()
    if (this.#stopped() || running.length >= 1 + state.options.maxHedges) return
    if (route.progress.overloads > 0 || hedgePaused(state, route.name))
      return this.#skip('overload')
    if (!hedgeBudgetLeft(state)) return this.#skip('budget')
    const got = await this.#hedgeKey()
    if (got === null) return this.#skip('no-free-key')
    if (this.#stopped() || !takeHedge(state)) {
      await got.lease?.report({ kind: 'cancelled' }).catch(() => {})
      if (!this.#stopped()) this.#skip('budget')
      return
    }
    this.hedges++
    const hedgeOf = (this.running()[0] ?? this.racers[0]) as Racer
    callHook(run.hooks.onHedge, {
      attemptNumber: run.attemptNumber + 1,
      hedgeOf: hedgeOf.number,
      route: route.name,
      keyId: got.lease?.keyId ?? null,
      afterMs: Math.round(now() - this.started),
    })
    this.start(got.lease, hedgeOf.number)
  }

  report(): HedgeReport {
    let cancelled = 0
    let cancelledMs = 0
    for (const record of this.run.attempts) {
      if (record.result !== 'hedge-lost') continue
      if (!this.racers.some((racer) => racer.number === record.attemptNumber)) continue
      cancelled++
      cancelledMs += record.durationMs
    }
    const wonByHedge = this.winner?.hedgeOf !== undefined
    return {
      started: this.hedges,
      cancelled,
      cancelledMs,
      wonByHedge,
      skipped: Object.freeze({ ...this.skipped }),
    }
  }
}

/** Waits until an attempt settles (`'settled'`) or the next hedge slot comes (`'hedge'`). */
async function nextEvent(race: Race, running: readonly Racer[]): Promise<'hedge' | 'settled'> {
  const wake = timer(race.nextSlotIn())
  const settled = (racer: Racer) => racer.promise.then(() => 'settled' as const)
  try {
    return await Promise.race([...running.map(settled), wake.promise])
  } finally {
    wake.clear()
  }
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
  lease: KeyLease | undefined,
  state: HedgeState,
): Promise<RaceEnd> {
  const race = new Race(run, route, state)
  race.start(lease, undefined)
  let last: Settled | undefined
  try {
    for (;;) {
      // Attempts settle while the race awaits anything (an event, the pool for a hedge):
      // each settlement is taken here once, in the order they happened.
      for (let next = race.settled.shift(); next !== undefined; next = race.settled.shift()) {
        last = next
        const { result } = next.started
        if (result.kind === 'committed' || result.stopped === 'hedge-lost') continue
        // A failure while another attempt still runs: the request goes on with the survivor.
        if (race.running().length > 0 || race.settled.length > 0) noteFailure(run, route, result)
      }
      const running = race.running()
      if (running.length === 0) break
      if ((await nextEvent(race, running)) === 'hedge') await race.maybeHedge()
    }
  } catch (error) {
    for (const racer of race.racers) racer.lost.abort(lostReason())
    await Promise.allSettled(race.racers.map((racer) => racer.promise))
    throw error
  }
  const { started } = (race.winner === undefined ? last : await race.winner.promise) as Settled
  return {
    ...started,
    keyId: run.attempts[started.record]?.keyId ?? null,
    hedges: race.report(),
  }
}
