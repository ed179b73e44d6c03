/**
 * The control line of a relay served in a process of its own under any runtime (Node or Bun):
 * the child prints `{"url"}` on stdout once listening, then answers each stdin line — `cpu`
 * (its CPU time so far, µs), `memory` (collected first: `process.memoryUsage()`, V8's heap
 * spaces, the peak resident set), `snapshot` (a heap snapshot written to the working
 * directory: its file name; Node only), `exit` — with one JSON line. No IPC channel, so Bun runs it as Node does.
 */

import { readFileSync } from 'node:fs'
import { createInterface } from 'node:readline'
import { getHeapSpaceStatistics, writeHeapSnapshot } from 'node:v8'

/** What `memory` answers, in bytes. */
export interface ServedMemory {
  readonly rss: number
  /** The peak resident set so far (Linux `VmHWM`; elsewhere `resourceUsage().maxRSS`). */
  readonly peakRss: number
  readonly heapTotal: number
  readonly heapUsed: number
  readonly external: number
  readonly arrayBuffers: number
  /** V8's heap spaces (committed bytes, used bytes), by name; empty where the runtime has none. */
  readonly spaces: Readonly<Record<string, { readonly size: number; readonly used: number }>>
}

function collect(): void {
  const bun = (globalThis as { Bun?: { gc(force: boolean): void } }).Bun
  if (bun !== undefined) {
    bun.gc(true)
    return
  }
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc === undefined) throw new Error('run with --expose-gc')
  gc()
  gc()
}

/** The peak resident set in bytes: `VmHWM` of /proc/self/status where there is one. */
function peakRss(): number {
  try {
    const match = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'))
    if (match?.[1] !== undefined) return Number(match[1]) * 1024
  } catch {
    // not Linux
  }
  return process.resourceUsage().maxRSS * 1024
}

function spaces(): ServedMemory['spaces'] {
  try {
    return Object.fromEntries(
      getHeapSpaceStatistics().map((space) => [
        space.space_name,
        { size: space.space_size, used: space.space_used_size },
      ]),
    )
  } catch {
    return {}
  }
}

function memory(): ServedMemory {
  collect()
  const { rss, heapTotal, heapUsed, external, arrayBuffers } = process.memoryUsage()
  return { rss, peakRss: peakRss(), heapTotal, heapUsed, external, arrayBuffers, spaces: spaces() }
}

/** Announces `url` and serves the control line until `exit`. */
export function serveControl(url: string): void {
  const say = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`)
  say({ url })
  const lines = createInterface({ input: process.stdin })
  lines.on('line', (line) => {
    if (line === 'cpu') {
      const { user, system } = process.cpuUsage()
      say({ cpu: user + system })
    } else if (line === 'memory') say({ memory: memory() })
    else if (line === 'exit') process.exit(0)
    else if (line === 'snapshot') say({ snapshot: writeHeapSnapshot() })
  })
  // The runner gone (its end of the pipe closed) ends this process too.
  lines.once('close', () => process.exit(0))
}
