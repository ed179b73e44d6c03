#!/usr/bin/env node
/**
 * The `stream-boundary` executable: runs {@link runCli} with the process's arguments and exits
 * with its code.
 *
 * @module
 */

import { runCli } from './main.js'

runCli(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (error: unknown) => {
    const text = error instanceof Error ? (error.stack ?? error.message) : String(error)
    process.stderr.write(`stream-boundary: ${text}\n`)
    process.exitCode = 2
  },
)
