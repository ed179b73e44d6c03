/**
 * The pool's scripts as commands: each one's Redis keys and arguments, sent through the
 * bounded link. Only key ids and lease ids go to Redis; secrets stay in the process.
 *
 * @module
 */

import type { KeyHeadroom, KeyOutcome } from '../key-pool/types.js'
import type { RedisLink } from './link.js'
import type { AcquireReply, ReportReply, RowReply, RowsReply, SyncPayload } from './replies.js'
import type { PoolSettings } from './settings.js'

/** The pool's scripts, a method each: the keys and arguments it sends, the reply it decodes. */
export class PoolCommands {
  constructor(
    private readonly link: RedisLink,
    private readonly settings: PoolSettings,
  ) {}

  /** Writes a whole state (a seed, or an outage's changes) once per `syncId`. */
  sync(operation: 'seed' | 'resync', syncId: string, payload: SyncPayload): Promise<RowsReply> {
    const { tag, allKeys, clockArg, config } = this.settings
    return this.link.script<RowsReply>(
      operation,
      'sync',
      [`${tag}:g:${syncId}`, ...allKeys],
      [clockArg(), config.leaseTtlMs, JSON.stringify(payload)],
    )
  }

  /** Picks a key and takes lease `id` on it for a request of `need` tokens, skipping `exclude`. */
  acquire(
    id: string,
    exclude: ReadonlySet<string> | undefined,
    need: number,
  ): Promise<AcquireReply> {
    const { cursorKey, allKeys, clockArg, config, configJson, ids, perKeyArgs } = this.settings
    return this.link.script<AcquireReply>(
      'acquire',
      'acquire',
      [cursorKey, ...allKeys],
      [
        clockArg(),
        config.leaseTtlMs,
        id,
        config.selection,
        configJson,
        need,
        ...ids.flatMap((keyId, index) => {
          const [limit, weight] = perKeyArgs[index] as number[]
          return [
            exclude?.has(keyId) ? 1 : 0,
            limit === undefined || limit === Number.POSITIVE_INFINITY ? -1 : limit,
            weight ?? 1,
          ]
        }),
      ],
    )
  }

  /**
   * Ends lease `leaseId` of key `index` (taken at breaker generation `gen`, after which the
   * key's spent counters stood at `spent`) with `kind`, and what its headers stated.
   */
  report(
    index: number,
    leaseId: string,
    lease: { readonly gen: number; readonly spent: readonly [string, string] },
    kind: KeyOutcome['kind'],
    retryAfterMs: number | undefined,
    headroom: KeyHeadroom | undefined,
  ): Promise<ReportReply> {
    const { redisKeys, clockArg, config, configJson } = this.settings
    return this.link.script<ReportReply>('report', 'report', redisKeys[index] as string[], [
      clockArg(),
      config.leaseTtlMs,
      leaseId,
      kind,
      finite(retryAfterMs) ? String(retryAfterMs) : '',
      configJson,
      lease.gen,
      headroomArg(headroom, lease.spent),
    ])
  }

  /**
   * A lease's commit: a probe's closes the circuit or re-enables the key; with `acquiredAt`
   * (the acquire's time), the time since joins the key's time to first output.
   */
  commit(index: number, leaseId: string, acquiredAt: string | undefined): Promise<RowReply> {
    return this.link.script<RowReply>('commit', 'commit', this.stateKeys(index), [
      this.settings.clockArg(),
      leaseId,
      acquiredAt ?? '',
    ])
  }

  /** Places or lifts the operator hold of key `index`. */
  toggle(index: number, disabled: boolean): Promise<RowReply> {
    return this.link.script<RowReply>(
      disabled ? 'disable' : 'enable',
      'toggle',
      this.stateKeys(index),
      [this.settings.clockArg(), disabled ? 1 : 0],
    )
  }

  stats(): Promise<RowsReply> {
    const { allKeys, clockArg } = this.settings
    return this.link.script<RowsReply>('stats', 'stats', allKeys, [clockArg()])
  }

  /** Extends `leases` (`[1-based key index, lease id]`) by `leaseTtlMs`. */
  renew(leases: readonly (readonly [number, string])[]): Promise<unknown> {
    const { allKeys, clockArg, config } = this.settings
    return this.link.script('renew', 'renew', allKeys, [
      clockArg(),
      config.leaseTtlMs,
      JSON.stringify(leases),
    ])
  }

  /** Asks whether Redis is back. */
  ping(): Promise<unknown> {
    return this.link.run('probe', () => this.link.client.ping())
  }

  /** The state and lease keys of key `index`. */
  private stateKeys(index: number): string[] {
    const [stateKey, leasesKey] = this.settings.redisKeys[index] as string[]
    return [stateKey as string, leasesKey as string]
  }
}

function finite(value: number | undefined): value is number {
  return typeof value === 'number' && Number.isFinite(value)
}

/** The stated numbers (finite ones only: JSON has no NaN) and the lease's spent counters. */
function headroomArg(
  headroom: KeyHeadroom | undefined,
  [sr, st]: readonly [string, string],
): string {
  if (headroom === undefined) return ''
  const fields = [
    'requestsRemaining',
    'requestsResetMs',
    'tokensRemaining',
    'tokensResetMs',
  ] as const
  const stated: Record<string, number> = { sr: Number(sr), st: Number(st) }
  for (const field of fields) {
    const value = headroom[field]
    if (finite(value)) stated[field] = value
  }
  return JSON.stringify(stated)
}
