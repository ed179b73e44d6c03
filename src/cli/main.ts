/**
 * The `stream-boundary` command, as a function (the bin is `bin.ts`). `stream-boundary chaos` fault-tests any OpenAI-Chat-,
 * OpenAI-Responses-, Anthropic-Messages- or Gemini-compatible gateway: see `--help`.
 * Needs nothing beyond Node and the library itself.
 *
 * @module
 */

import { parseChaosArgs, UsageError, usage } from './args.js'
import { formatReport } from './report.js'
import { runChaos, TargetUnreachableError } from './run.js'

/** Where the command writes. */
export interface CliIo {
  readonly out: (text: string) => void
  readonly err: (text: string) => void
}

const processIo: CliIo = {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
}

/** Runs the command with `argv` (without `node` and the script); resolves to the exit code. */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  const [command, ...rest] = argv
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    io.out(usage)
    return command === undefined ? 2 : 0
  }
  if (command !== 'chaos') {
    io.err(`stream-boundary: unknown command "${command}"\n\n${usage}`)
    return 2
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    io.out(usage)
    return 0
  }
  try {
    const options = parseChaosArgs(rest)
    const report = await runChaos(options, io.err)
    io.out(options.json ? JSON.stringify(report, null, 2) : formatReport(report))
    return report.exitCode
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(
        `stream-boundary chaos: ${error.message}\nRun "stream-boundary chaos --help" for usage.`,
      )
      return 2
    }
    if (error instanceof TargetUnreachableError) {
      io.err(`stream-boundary chaos: ${error.message}`)
      return 2
    }
    throw error
  }
}
