/**
 * The key pool seam: pick a usable credential for an attempt, and learn from the outcome.
 * Only key ids ever appear in errors, logs, hooks and serialised state; secrets never do.
 *
 * @module
 */

/**
 * One credential.
 *
 * @group Key pools
 */
export interface PoolKey {
  /** A stable, non-secret id: the only thing reported anywhere. */
  readonly id: string
  /** The credential itself. Never logged, serialised or put in an error. */
  readonly secret: string
  /**
   * Share of traffic under `weighted` selection.
   * @default 1
   */
  readonly weight?: number
  /** Most concurrent leases of this key (overrides the pool's `maxInflight`). */
  readonly maxInflight?: number
  /** Anything the host wants back with the lease (base URL, region, model). */
  readonly metadata?: Readonly<Record<string, unknown>>
}

/**
 * What an attempt taught about its key. Only `rate-limited`, `auth-failed` and
 * `server-error` are held against the key; the rest are not its fault.
 *
 * @group Key pools
 */
export type KeyOutcome =
  | {
      readonly kind: 'success'
      /** What the response's rate-limit headers said of the key's remaining budget. */
      readonly headroom?: KeyHeadroom | undefined
    }
  /** 429 or a rate-limit error frame: cool the key down until it may be used again. */
  | {
      readonly kind: 'rate-limited'
      readonly retryAfterMs?: number | undefined
      /** What the 429's rate-limit headers said of the key's remaining budget. */
      readonly headroom?: KeyHeadroom | undefined
    }
  /**
   * 401/403: the upstream rejected the credential. The key is disabled for the pool's
   * `authDisableMs`, then admits one probe; a success re-enables it.
   */
  | { readonly kind: 'auth-failed'; readonly status?: number | undefined }
  /** 5xx or a connection failure: counts toward the key's circuit breaker. */
  | { readonly kind: 'server-error'; readonly status?: number | undefined }
  /** Capacity trouble at the provider (529, `overloaded_error`): shared by every key. */
  | { readonly kind: 'overloaded' }
  /** Empty stream, first-byte/first-output timeout, malformed frames: rotate, don't cool. */
  | { readonly kind: 'protocol-fault' }
  /** The client went away or the downstream failed: never the key's fault. */
  | { readonly kind: 'client-gone' }
  /** The upstream refused the request itself (400, 404, 422): the key worked. */
  | { readonly kind: 'rejected' }
  /**
   * The attempt was ended by the relay itself (a hedged attempt that lost, an unused lease):
   * neither a success nor a failure of the key.
   */
  | { readonly kind: 'cancelled' }

/**
 * A key's remaining budget as one upstream response stated it (`x-ratelimit-remaining-*` and
 * `x-ratelimit-reset-*`, `anthropic-ratelimit-*-remaining` and `-reset`). Every field is
 * optional: a provider that states nothing leaves the key's headroom unknown, and an unknown
 * headroom is selected as it is today. Resets are durations from the response, not dates, so
 * replicas with skewed clocks agree.
 *
 * @group Key pools
 */
export interface KeyHeadroom {
  /** Requests the key may still send before its request budget refills. */
  readonly requestsRemaining?: number | undefined
  /** Milliseconds until the request budget is full again. */
  readonly requestsResetMs?: number | undefined
  /** Tokens the key may still spend before its token budget refills (input and output summed when the provider splits them, the smaller budget when it states both). */
  readonly tokensRemaining?: number | undefined
  /** Milliseconds until the token budget is full again. */
  readonly tokensResetMs?: number | undefined
}

/**
 * A key handed out for one attempt. `report` exactly once (a second report is ignored): it
 * ends the lease and frees the key's in-flight slot.
 *
 * @group Key pools
 */
export interface KeyLease {
  readonly keyId: string
  readonly secret: string
  readonly metadata: Readonly<Record<string, unknown>> | undefined
  /**
   * The attempt committed: its first visible output proves the key works. Records a success
   * for the circuit breaker (and closes a half-open circuit when this lease is its probe) at
   * once, while the slot stays held until `report`. Idempotent; ignored after `report`.
   */
  commit(): void
  /** Ends the lease and records what the attempt taught about the key. */
  report(outcome: KeyOutcome): Promise<void>
}

/**
 * What {@link KeyPool.acquire} found. A discriminated union on `kind`.
 *
 * @group Key pools
 */
export type AcquireResult =
  | { readonly kind: 'leased'; readonly lease: KeyLease }
  /**
   * Every candidate is cooling down: a rate-limit cooldown, an open circuit or an auth hold.
   * `rateLimited` is true only when every candidate cools because of an upstream rate-limit
   * signal (then, and only then, "every key is rate limited" is true).
   */
  | { readonly kind: 'cooling'; readonly retryInMs: number; readonly rateLimited: boolean }
  /**
   * No candidate is free now, and at least one is only at its in-flight cap: a release may
   * free it at any time. `retryInMs` is when the earliest cooling candidate (if any) is usable.
   * Under `headroom` selection also: every free candidate is predicted out of its stated
   * budget; `retryInMs` is then when the first refills (a report stating room may come
   * sooner).
   */
  | { readonly kind: 'busy'; readonly retryInMs: number | undefined }
  /**
   * No candidate at all: no keys, all disabled (by an operator, or held after the upstream
   * rejected their credentials: `keyIds` names them), or all excluded.
   */
  | {
      readonly kind: 'unavailable'
      readonly reason: 'no-keys' | 'all-disabled' | 'all-excluded'
      /** With `all-disabled`: the ids of the keys held because the upstream rejected them. */
      readonly rejectedKeyIds?: readonly string[]
    }

/**
 * Options of {@link KeyPool.acquire}.
 *
 * @group Key pools
 */
export interface AcquireOptions {
  /** Key ids not to hand out (those already tried in this request). */
  readonly exclude?: ReadonlySet<string> | undefined
  /**
   * When no candidate is free and some are only busy (or, under `headroom`, every free one
   * is predicted out), wait up to this long for a release or a refill instead of answering
   * `busy`. Waiters are served first come, first served; a release
   * wakes them (no polling in the memory pool).
   * @default 0 (answer at once)
   */
  readonly waitMs?: number | undefined
  /** Aborting ends the wait (the waiter is removed); the promise rejects with its reason. */
  readonly signal?: AbortSignal | undefined
  /**
   * What the request is expected to spend, estimated from what it states (its input size,
   * `max_tokens` / `max_output_tokens`). Under `headroom` selection a key predicted to lack
   * this much is passed over like a cooling key; when every free key is, the answer is
   * `busy` until the first refill (waited for within `waitMs`), never a lease of a key
   * predicted out.
   */
  readonly cost?: { readonly tokens?: number | undefined } | undefined
}

/**
 * The serialisable state of one key (no secret, no inflight count: leases are local).
 *
 * @group Key pools
 */
export interface KeyStateSnapshot {
  readonly id: string
  readonly disabled: boolean
  /**
   * Epoch milliseconds until which an auth hold lasts (then one probe is admitted); 0 for a
   * key disabled by an operator (until `enable`) or not disabled.
   */
  readonly disabledUntil?: number
  /** Epoch milliseconds until which the key cools down (0 when it does not). */
  readonly cooldownUntil: number
  /** Server errors within the breaker's window. */
  readonly failures: number
  readonly circuit: 'closed' | 'open' | 'half-open'
  /** Epoch milliseconds until which an open circuit stays open. */
  readonly circuitUntil: number
}

/**
 * The serialisable state of a pool: `toJSON()` out, `initialState` in.
 *
 * @group Key pools
 */
export interface KeyPoolSnapshot {
  readonly version: 1
  readonly keys: readonly KeyStateSnapshot[]
}

/**
 * Outcome counters of one key, for observability and tests.
 *
 * @group Key pools
 */
export interface KeyStats {
  readonly id: string
  readonly leases: number
  readonly inflight: number
  readonly outcomes: Readonly<Record<KeyOutcome['kind'], number>>
}

/**
 * A change of a key's state, as told to a pool's `onKeyState` hook. Never holds a secret.
 *
 * @group Key pools
 */
export interface KeyStateEvent {
  readonly keyId: string
  readonly state:
    | 'disabled'
    | 'enabled'
    | 'cooling'
    | 'circuit-open'
    | 'circuit-half-open'
    | 'circuit-closed'
  /** Why: `auth-failed`, `operator`, `rate-limited`, `failure-rate`, `probe-succeeded`, `probe-failed`, `timer`. */
  readonly reason:
    | 'auth-failed'
    | 'operator'
    | 'rate-limited'
    | 'failure-rate'
    | 'probe-succeeded'
    | 'probe-failed'
    | 'timer'
  /** Epoch milliseconds until which the new state lasts, when bounded. */
  readonly until?: number | undefined
}

/**
 * A pool of credentials. Implement it for a shared store; `createMemoryKeyPool` is the default.
 *
 * @group Key pools
 */
export interface KeyPool {
  /** Leases the next usable key, or says when one may be (or why none can). */
  acquire(options?: AcquireOptions): Promise<AcquireResult>
  /** Re-enables a key disabled by an auth failure (or by `disable`). */
  enable(id: string): Promise<void>
  /** Takes a key out of rotation until `enable`. */
  disable(id: string): Promise<void>
  /** Outcome counters per key. */
  stats(): Promise<readonly KeyStats[]>
  /** The serialisable state. */
  toJSON(): KeyPoolSnapshot
}
