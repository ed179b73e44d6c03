/**
 * What the pool and its Lua scripts say to each other: the replies, the sync payload, the
 * state this replica keeps of each key and of the outage fallback, and their conversions.
 *
 * @module
 */

import type { AuthFailureWithoutLease } from '../key-pool/outcomes.js'
import type {
  AcquireResult,
  KeyLease,
  KeyOutcome,
  KeyPool,
  KeyPoolSnapshot,
  KeyStateEvent,
  KeyStateSnapshot,
} from '../key-pool/types.js'
import { luaScripts } from './scripts.js'

export type OutcomeKind = KeyOutcome['kind']

type Circuit = KeyStateSnapshot['circuit']

/** One key as a script returns it: the snapshot fields, inflight, leases, outcome counts. */
export type Row = readonly [
  disabled: 0 | 1,
  cooldownUntil: string,
  failures: number,
  circuit: Circuit,
  circuitUntil: string,
  inflight: number,
  leases: number,
  disabledUntil: string,
  outcomes?: readonly number[],
]

/** `[1-based key index, state, reason, until ('' when unbounded)]`; `{}` when none (cjson). */
export type EventRows = readonly (readonly [
  number,
  KeyStateEvent['state'],
  KeyStateEvent['reason'],
  string,
])[]

export type AcquireReply = readonly [
  verdict:
    | readonly [
        'leased',
        index: number,
        generation: number,
        probe: 0 | 1,
        requestsSpent: string,
        tokensSpent: string,
      ]
    | readonly ['busy', retryInMs: string | number]
    | readonly ['cooling', retryInMs: string, rateLimited: 0 | 1]
    | readonly ['unavailable', 'all-disabled' | 'all-excluded', rejected?: readonly number[]]
    | readonly ['index'],
  now: string,
  rows: IndexedRows,
  events: EventRows,
  seen: string,
]

/** `[[1-based key index, row], ...]` of the keys a script touched; `{}` when none (cjson). */
export type IndexedRows = readonly (readonly [number, Row])[]

/** The index script's reply (the rows come with the next acquire's change feed). */
export type IndexReply = readonly [now: string, events: EventRows]

export type ReportReply = readonly [applied: 0 | 1, now: string, row: Row, events: EventRows]

export type RowReply = readonly [row: Row, events: EventRows]

export type RowsReply = readonly [now: string, rows: readonly Row[], events?: EventRows]

/** An outcome reported during an outage for a lease Redis still holds. */
interface Replay {
  /** 1-based index of the key (Lua). */
  readonly key: number
  readonly lease: string
  readonly gen: number
  readonly kind: OutcomeKind
  readonly retryAfterMs?: number
  readonly at: number
}

export interface SyncKey {
  /** Written only when Redis does not know the key (it restarted empty, or initialState). */
  seed: readonly [0 | 1, number, number, Circuit, number, number]
  /** Any other change of the hold during the outage (disable, enable, a probe's): it wins. */
  disabled?: boolean
  disabledUntil?: number
  /** An auth failure during the outage: merged as a report is, until this epoch ms. */
  authHold?: number
  cooldownUntil?: number
  circuit?: readonly [number, Circuit, number]
  /** Cumulative for this outage: leases, then one count per outcome kind. */
  counts: readonly number[]
}

export interface SyncPayload {
  keys: readonly SyncKey[]
  release: readonly string[]
  replay: readonly Replay[]
  adopt: readonly (readonly [number, string])[]
  config: ScriptConfig
}

/** The options the scripts apply, sent as JSON. */
export interface ScriptConfig {
  readonly defaultCooldownMs: number
  readonly minCooldownMs: number
  readonly maxCooldownMs: number
  readonly headroomHorizonMs: number
  readonly latencyHalfLifeMs: number
  readonly failureThreshold: number
  readonly breakerWindowMs: number
  readonly breakerFailureRatio: number
  readonly circuitOpenMs: number
  readonly authDisableMs: number
}

/** What this replica last learned from Redis about one key. */
export interface Known {
  disabled: boolean
  disabledUntil: number
  cooldownUntil: number
  failures: number
  circuit: Circuit
  circuitUntil: number
  leases: number
  outcomes: Record<OutcomeKind, number>
}

/** The local pool of one outage, and what must go back to Redis when it ends. */
export interface Fallback {
  readonly id: string
  readonly pool: KeyPool & AuthFailureWithoutLease
  /** The state when the outage began: only what changed since is pushed back. */
  readonly baseline: KeyPoolSnapshot
  /** Local leases taken on behalf of Redis leases that were open when the outage began. */
  readonly shadows: number[]
  readonly release: string[]
  readonly replay: Replay[]
}

export interface OpenLease {
  readonly index: number
  readonly id: string
  /** The key's breaker generation when the lease was handed out. */
  readonly gen: number
  /** Redis made it a probe (half-open circuit or auth hold): its commit must reach Redis. */
  readonly probe: boolean
  /** The acquire's time (Redis's clock): under `fastest` its commit measures the latency. */
  readonly acquiredAt: string
  /** The key's spent counters after this lease (`headroom`: a statement is counted from them). */
  readonly spent: readonly [requests: string, tokens: string]
  /** Redis counts this lease (it came from Redis, or was adopted after an outage). */
  inRedis: boolean
  local: { readonly fallback: Fallback; readonly lease: KeyLease } | undefined
  shadowing: Promise<void> | undefined
}

/** The slice of an ioredis client the pool uses; `Redis` and `Cluster` both have it. */
export interface ScriptClient {
  readonly status: string
  ping(): Promise<unknown>
  defineCommand(name: string, definition: { lua: string }): void
  once(event: 'ready', listener: () => void): unknown
  off(event: 'ready', listener: () => void): unknown
}

/** The name of one of the pool's Lua scripts. */
export type ScriptName = keyof typeof luaScripts

export type ScriptMethod = (this: unknown, ...args: (string | number)[]) => Promise<unknown>

/** FNV-1a: enough to tell two versions of a script apart. */
/** A short FNV-1a hash of `text`. */
export function fingerprint(text: string): string {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return (hash >>> 0).toString(36)
}

// The fingerprint keeps two versions of this package on one client from overwriting each
// other's scripts.
export const commandNames = Object.fromEntries(
  Object.entries(luaScripts).map(([name, lua]) => [
    name,
    `streamBoundaryPool_${name}_${fingerprint(lua)}`,
  ]),
) as Record<ScriptName, string>

export const downStatuses = new Set(['end', 'close', 'reconnecting', 'disconnecting'])

/** How many failed acquires' ids are kept for release at the next resync. */
export const maxAbandoned = 1024

/** setTimeout/setInterval fire at once beyond this. */
export const maxDelay = 2 ** 31 - 1

function seedOf(state: Omit<KeyStateSnapshot, 'id'>): SyncKey['seed'] {
  return [
    state.disabled ? 1 : 0,
    state.cooldownUntil,
    state.failures,
    state.circuit,
    state.circuitUntil,
    state.disabledUntil ?? 0,
  ]
}

/**
 * What one key's state at the end of an outage pushes back to Redis: its seed, cooldown and
 * cumulative counts, and what changed since `before`, the state when the outage began.
 */
export function syncKeyOf(
  state: KeyStateSnapshot,
  before: KeyStateSnapshot,
  counts: readonly number[],
): SyncKey {
  const entry: SyncKey = { seed: seedOf(state), cooldownUntil: state.cooldownUntil, counts }
  const until = state.disabledUntil ?? 0
  const untilBefore = before.disabledUntil ?? 0
  if (state.disabled !== before.disabled || until !== untilBefore) {
    // A timed hold that no local enable preceded is an auth failure: Redis merges it as a
    // report, so an operator hold placed there meanwhile stays.
    if (state.disabled && until > 0 && !(before.disabled && untilBefore === 0)) {
      entry.authHold = until
    } else {
      entry.disabled = state.disabled
      entry.disabledUntil = until
    }
  }
  if (
    state.failures !== before.failures ||
    state.circuit !== before.circuit ||
    state.circuitUntil !== before.circuitUntil
  ) {
    entry.circuit = [state.failures, state.circuit, state.circuitUntil]
  }
  return entry
}

/** What a seed writes: every key's starting state, for the keys Redis does not know yet. */
export function seedPayload(known: readonly Known[], config: ScriptConfig): SyncPayload {
  return {
    keys: known.map((state) => ({ seed: seedOf(state), counts: [] })),
    release: [],
    replay: [],
    adopt: [],
    config,
  }
}

/** The answer of an acquire that Redis did not lease (`ids`: the keys in script order). */
export function refusalOf(
  verdict: Exclude<AcquireReply[0], readonly ['leased', ...unknown[]] | readonly ['index']>,
  ids: readonly string[],
): Exclude<AcquireResult, { kind: 'leased' }> {
  switch (verdict[0]) {
    case 'busy': {
      const retryInMs = Number(verdict[1])
      return { kind: 'busy', retryInMs: retryInMs < 0 ? undefined : retryInMs }
    }
    case 'cooling':
      return { kind: 'cooling', retryInMs: Number(verdict[1]), rateLimited: verdict[2] === 1 }
    default: {
      if (verdict[1] === 'all-excluded') return { kind: 'unavailable', reason: 'all-excluded' }
      // cjson writes an empty list as {}.
      const rejected = Array.isArray(verdict[2]) ? verdict[2] : []
      const rejectedKeyIds = rejected.map((index) => ids[index - 1] as string)
      return { kind: 'unavailable', reason: 'all-disabled', rejectedKeyIds }
    }
  }
}

export function decode<T>(reply: unknown): T {
  if (typeof reply !== 'string') throw new TypeError('A key pool script returned no JSON')
  return JSON.parse(reply) as T
}
