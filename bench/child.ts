/** Benchmarks that run in a process of their own (a relay under test, the memory bench). */

import { type ChildProcess, fork } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
// scripts/bench.mjs builds each child next to the runner's bundle; otherwise tsx runs the TypeScript.
const built = import.meta.url.endsWith('.mjs')

/** Forks `bench/<name>`, built or through tsx, with `execArgv` added to Node's flags. */
export function forkChild(
  name: string,
  args: readonly string[],
  execArgv: string[] = [],
): ChildProcess {
  return fork(join(here, `${name}.${built ? 'mjs' : 'ts'}`), args, {
    execArgv: built ? execArgv : [...execArgv, '--import', 'tsx'],
    stdio: 'inherit',
  })
}

/** Forks `bench/<name>` and waits for the `{ url }` it sends once it listens. */
export function startServingChild(
  name: string,
  args: readonly string[],
): Promise<{ child: ChildProcess; url: string }> {
  const child = forkChild(name, args)
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('message', (message) => resolve({ child, url: (message as { url: string }).url }))
  })
}

/** A child's CPU time so far (user + system, µs), asked with `cpu`. */
export function cpuOf(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.once('message', (message) => {
      const { user, system } = (message as { cpu: { user: number; system: number } }).cpu
      resolve(user + system)
    })
    child.send('cpu')
  })
}
