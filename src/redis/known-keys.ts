/**
 * What this replica last heard from Redis of each key: the state and counts every script
 * answers with, the snapshot `toJSON` gives, and the `onKeyState` events a script reports.
 *
 * @module
 */

import { outcomeKinds, tellKeyState } from '../key-pool/outcomes.js'
import type {
  KeyPoolSnapshot,
  KeyStateEvent,
  KeyStateSnapshot,
  KeyStats,
} from '../key-pool/types.js'
import type { EventRows, IndexedRows, Known, Row } from './replies.js'

/** What this replica last heard from Redis of each key: its snapshot and stats. */
export class KnownKeys {
  constructor(
    readonly states: Known[],
    readonly ids: readonly string[],
    readonly onKeyState: ((event: KeyStateEvent) => void) | undefined,
  ) {}

  /** Takes in what a script answered of key `index`, and tells what it changed (`events`). */
  learn(index: number, row: Row, events?: EventRows): void {
    this.take(index, row)
    this.tellEvents(events, index)
  }

  /** Takes in what a script answered of every key, and tells what it changed (`events`). */
  learnAll(rows: readonly Row[], events?: EventRows): void {
    for (const [index, row] of rows.entries()) this.take(index, row)
    this.tellEvents(events)
  }

  /** Takes in the health of the keys whose health changed (the change feed), and the events. */
  learnSome(rows: IndexedRows, events?: EventRows): void {
    if (Array.isArray(rows)) for (const [index, row] of rows) this.take(index - 1, row, false)
    this.tellEvents(events)
  }

  /** Every key's stats: the counts last learned, and the in-flight leases of `rows`. */
  statsOf(rows: readonly Row[]): KeyStats[] {
    return this.states.map((state, index) => ({
      id: this.ids[index] as string,
      leases: state.leases,
      inflight: rows[index]?.[5] ?? 0,
      outcomes: { ...state.outcomes },
    }))
  }

  snapshot(): KeyPoolSnapshot {
    return {
      version: 1,
      // Counts are stats, not state.
      keys: this.states.map(
        ({ leases, outcomes, ...state }, index): KeyStateSnapshot => ({
          id: this.ids[index] as string,
          ...state,
        }),
      ),
    }
  }

  private take(index: number, row: Row, withCounts = true): void {
    const state = this.states[index]
    if (state === undefined) return
    state.disabled = row[0] === 1
    state.cooldownUntil = Number(row[1])
    state.failures = row[2]
    state.circuit = row[3]
    state.circuitUntil = Number(row[4])
    if (withCounts) state.leases = row[6]
    state.disabledUntil = Number(row[7])
    const counts = row[8]
    if (counts !== undefined) {
      outcomeKinds.forEach((kind, j) => {
        state.outcomes[kind] = counts[j] ?? 0
      })
    }
  }

  /** Tells `onKeyState` what a script changed (of key `index`, or of the key each event names). */
  private tellEvents(events: EventRows | undefined, index?: number): void {
    if (!Array.isArray(events)) return
    for (const [i, state, reason, until] of events) {
      const keyId = this.ids[index ?? i - 1]
      if (keyId === undefined) continue
      tellKeyState(this.onKeyState, {
        keyId,
        state,
        reason,
        ...(until === '' ? {} : { until: Number(until) }),
      })
    }
  }
}
