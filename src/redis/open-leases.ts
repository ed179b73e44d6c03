/**
 * The leases this replica holds open, and their renewal: every third of `leaseTtlMs` while
 * any is open in Redis, so a long stream keeps its slot and a crashed replica's slots expire.
 *
 * @module
 */

import type { PoolCommands } from './commands.js'
import { maxDelay, type OpenLease } from './replies.js'

/** This replica's open leases; renews those Redis holds while `mayRenew()` says so. */
export class OpenLeases implements Iterable<OpenLease> {
  private readonly entries = new Set<OpenLease>()
  private timer: ReturnType<typeof setInterval> | undefined

  constructor(
    private readonly commands: PoolCommands,
    private readonly leaseTtlMs: number,
    /** False while closed or degraded. */
    private readonly mayRenew: () => boolean,
    /** Redis failed a renewal. */
    private readonly onFailure: (error: unknown) => void,
  ) {}

  [Symbol.iterator](): Iterator<OpenLease> {
    return this.entries[Symbol.iterator]()
  }

  add(entry: OpenLease): void {
    this.entries.add(entry)
  }

  /** A reported lease: never renewed again; the renewal stops with the last one. */
  delete(entry: OpenLease): void {
    this.entries.delete(entry)
    if (this.entries.size === 0) this.stopRenewal()
  }

  startRenewal(): void {
    if (this.timer !== undefined || !this.mayRenew() || this.entries.size === 0) return
    const every = Math.min(this.leaseTtlMs / 3, maxDelay)
    this.timer = setInterval(() => this.renew(), every)
    // Housekeeping: it never holds the process.
    ;(this.timer as { unref?: () => void }).unref?.()
  }

  stopRenewal(): void {
    if (this.timer === undefined) return
    clearInterval(this.timer)
    this.timer = undefined
  }

  private renew(): void {
    const held = [...this.entries].filter((open) => open.inRedis)
    if (held.length === 0 || !this.mayRenew()) {
      this.stopRenewal()
      return
    }
    this.commands.renew(held.map((open) => [open.index, open.id] as const)).catch(this.onFailure)
  }
}
