/**
 * The pool's scripts as commands: each one's Redis keys and arguments, sent through the
 * bounded link. Only key ids and lease ids go to Redis; secrets stay in the process.
 *
 * @module
 */

import type { KeyHeadroom, KeyOutcome } from '../key-pool/types.js'
import type { RedisLink } from './link.js'
import type {
  AcquireReply,
  IndexReply,
  ReportReply,
  RowReply,
  RowsReply,
  SyncPayload,
} from './replies.js'
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
      [
        clockArg(),
        config.leaseTtlMs,
        JSON.stringify(payload),
        this.settings.indexKeys[0] as string,
      ],
    )
  }

  /**
   * Builds the index for this pool's keys, limits, weights and selection (`index-lua.ts`);
   * with `ifMissing`, only when Redis has none for them.
   */
  index(ifMissing = false): Promise<IndexReply> {
    const { tag, indexKeys, clockArg, config, configJson, indexFingerprint, indexList } =
      this.settings
    return this.link.script<IndexReply>(
      'acquire',
      'index',
      [indexKeys[0] as string],
      [
        clockArg(),
        tag,
        indexFingerprint,
        config.selection,
        configJson,
        indexList,
        ifMissing ? 1 : 0,
      ],
    )
  }

  /**
   * Picks a key and takes lease `id` on it for a request of `need` tokens, skipping `exclude`.
   * Answers `['index']` when the index must be built first.
   */
  acquire(
    id: string,
    exclude: ReadonlySet<string> | undefined,
    need: number,
    seen: string,
  ): Promise<AcquireReply> {
    const { tag, indexKeys, clockArg, config, configJson, indexFingerprint, indexOf, members } =
      this.settings
    const excluded: string[] = []
    if (exclude !== undefined) {
      for (const keyId of exclude) {
        const index = indexOf.get(keyId)
        if (index !== undefined) excluded.push(members[index] as string)
      }
    }
    return this.link.script<AcquireReply>('acquire', 'acquire', indexKeys, [
      clockArg(),
      config.leaseTtlMs,
      id,
      config.selection,
      configJson,
      need,
      tag,
      indexFingerprint,
      JSON.stringify(excluded),
      seen,
    ])
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
      ...this.keyArgs(index),
      lease.spent[0],
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
      ...this.keyArgs(index),
    ])
  }

  /** Places or lifts the operator hold of key `index`. */
  toggle(index: number, disabled: boolean): Promise<RowReply> {
    return this.link.script<RowReply>(
      disabled ? 'disable' : 'enable',
      'toggle',
      this.stateKeys(index),
      [this.settings.clockArg(), disabled ? 1 : 0, ...this.keyArgs(index)],
    )
  }

  stats(): Promise<RowsReply> {
    const { allKeys, clockArg } = this.settings
    return this.link.script<RowsReply>('stats', 'stats', allKeys, [clockArg()])
  }

  /** Extends `leases` (`[0-based key index, lease id]`) by `leaseTtlMs`. */
  renew(leases: readonly (readonly [number, string])[]): Promise<unknown> {
    const { indexKeys, clockArg, config, tag, ids } = this.settings
    return this.link.script(
      'renew',
      'renew',
      [indexKeys[0] as string],
      [
        clockArg(),
        config.leaseTtlMs,
        tag,
        JSON.stringify(leases.map(([index, id]) => [index + 1, ids[index], id])),
      ],
    )
  }

  /** Asks whether Redis is back. */
  ping(): Promise<unknown> {
    return this.link.run('probe', () => this.link.client.ping())
  }

  /** The `{prefix}` tag, and key `index`'s 1-based index and id (for the index). */
  private keyArgs(index: number): [string, number, string] {
    return [this.settings.tag, index + 1, this.settings.ids[index] as string]
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
