/**
 * Runs the user's gateway command for the length of a chaos run: starts it in its own
 * process group, waits until the target accepts connections, samples its memory on Linux,
 * and stops the whole group at the end.
 *
 * @module
 */

import { type ChildProcess, spawn } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { connect } from 'node:net'

/** A gateway the command started. */
export interface GatewayProcess {
  readonly pid: number
  /** Resident memory of the gateway's process group now, in bytes (`null` off Linux). */
  rssBytes(): number | null
  /** The largest resident memory a process of the group reached (VmHWM), in bytes. */
  peakRssBytes(): number | null
  /** The output it wrote, last 4 KiB (shown when it fails to start or dies). */
  readonly output: () => string
  /** The exit code (or the signal) once the command has exited, else `undefined`. */
  exited(): number | string | undefined
  /** Resolves when the command exits, or after `ms`, whichever comes first. */
  exitWithin(ms: number): Promise<void>
  /** Kills the process group at once, synchronously (for an interrupted run). */
  killNow(): void
  /** Stops the process group: SIGTERM, then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>
}

function statusField(pid: number, field: 'VmRSS' | 'VmHWM'): number | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)
    return match === null ? null : Number(match[1]) * 1024
  } catch {
    return null
  }
}

/** Live (not zombie) processes of a process group (Linux `/proc`); empty elsewhere. */
function groupMembers(pgid: number): number[] {
  let entries: string[]
  try {
    entries = readdirSync('/proc').filter((name) => /^\d+$/.test(name))
  } catch {
    return []
  }
  return entries.map(Number).filter((pid) => {
    try {
      // Fields after the command name (which may hold spaces): state, ppid, pgrp.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      return Number(fields[2]) === pgid && fields[0] !== 'Z'
    } catch {
      return false
    }
  })
}

function sumOver(pgid: number, field: 'VmRSS' | 'VmHWM', combine: 'sum' | 'max'): number | null {
  const values = groupMembers(pgid)
    .map((pid) => statusField(pid, field))
    .filter((value): value is number => value !== null)
  if (values.length === 0) return null
  return combine === 'sum' ? values.reduce((a, b) => a + b, 0) : Math.max(...values)
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Whether a process of the group still runs (a killed child's zombie does not count). */
function groupAlive(pgid: number): boolean {
  if (process.platform === 'linux') return groupMembers(pgid).length > 0
  try {
    process.kill(-pgid, 0)
    return true
  } catch {
    return false
  }
}

/** Starts `command` with a shell, in a new process group, with `env` added to this environment. */
export function startGatewayProcess(
  command: string,
  env: Readonly<Record<string, string>> = {},
): GatewayProcess {
  const child: ChildProcess = spawn(command, {
    shell: true,
    env: { ...process.env, ...env },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString('utf8')).slice(-4096)
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  let exit: number | string | undefined
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null) resolve()
    child.once('exit', (code, signal) => {
      exit = code ?? signal ?? 'unknown'
      resolve()
    })
    child.once('error', () => {
      exit = 'failed to start'
      resolve()
    })
  })
  const pid = child.pid ?? -1
  const signalGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-pid, signal)
    } catch {
      // The group is gone already.
    }
  }
  return {
    pid,
    rssBytes: () => sumOver(pid, 'VmRSS', 'sum'),
    peakRssBytes: () => sumOver(pid, 'VmHWM', 'max'),
    output: () => output,
    exited: () => exit,
    async exitWithin(ms) {
      let timer: ReturnType<typeof setTimeout> | undefined
      await Promise.race([
        exited,
        new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
      ])
      clearTimeout(timer)
    },
    killNow: () => signalGroup('SIGKILL'),
    async stop(graceMs = 2000) {
      if (pid < 0) return
      signalGroup('SIGTERM')
      let timer: ReturnType<typeof setTimeout> | undefined
      const killed = new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          signalGroup('SIGKILL')
          resolve()
        }, graceMs)
      })
      await Promise.race([exited, killed])
      clearTimeout(timer)
      // The shell may exit before its children: make sure none is left behind.
      signalGroup('SIGKILL')
      for (let i = 0; i < 50 && groupAlive(pid); i++) await sleep(20)
      child.stdout?.destroy()
      child.stderr?.destroy()
    },
  }
}

/** Whether `url`'s host and port accept a TCP connection now. */
export function portOpen(url: string): Promise<boolean> {
  const { hostname, port, protocol } = new URL(url)
  const host = hostname.replace(/^\[|\]$/g, '')
  const portNumber = Number(port || (protocol === 'https:' ? 443 : 80))
  return new Promise<boolean>((resolve) => {
    const socket = connect(portNumber, host)
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => {
      socket.destroy()
      resolve(false)
    })
  })
}

/** How the command ended, in words: `exit code 3`, `signal SIGKILL`, `failed to start`. */
export function exitWords(exit: number | string): string {
  return typeof exit === 'number'
    ? `exit code ${exit}`
    : exit.startsWith('SIG')
      ? `signal ${exit}`
      : exit
}

/**
 * Resolves once `url`'s host and port accept a TCP connection; rejects after `timeoutMs`, or
 * as soon as the gateway the command started exits: its exit code says why nothing listens,
 * where waiting out the bound would only say that nothing did.
 */
export async function waitForPort(
  url: string,
  timeoutMs: number,
  gateway?: Pick<GatewayProcess, 'exited' | 'exitWithin'>,
): Promise<void> {
  const { hostname, port, protocol } = new URL(url)
  const host = hostname.replace(/^\[|\]$/g, '')
  const portNumber = Number(port || (protocol === 'https:' ? 443 : 80))
  const deadline = performance.now() + timeoutMs
  for (;;) {
    if (await portOpen(url)) return
    const exit = gateway?.exited()
    if (exit !== undefined)
      throw new Error(
        `the gateway exited (${exitWords(exit)}) before ${host}:${portNumber} accepted a connection`,
      )
    if (performance.now() > deadline)
      throw new Error(`the target ${host}:${portNumber} accepted no connection in ${timeoutMs} ms`)
    // A gateway's exit ends the wait at once.
    if (gateway === undefined) await new Promise((resolve) => setTimeout(resolve, 100))
    else await gateway.exitWithin(100)
  }
}
