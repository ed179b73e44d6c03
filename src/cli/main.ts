/**
 * The `stream-boundary` command, as a function (the bin is `bin.ts`). `stream-boundary chaos` fault-tests any OpenAI-Chat-,
 * OpenAI-Responses-, Anthropic-Messages- or Gemini-compatible gateway; `stream-boundary upstream`
 * serves the fault-injecting upstream alone: see `--help`.
 * Needs nothing beyond Node and the library itself.
 *
 * @module
 */

import { parseChaosArgs, UsageError, usage } from './args.js'
import { formatReport } from './report.js'
import { runChaos, TargetUnreachableError } from './run.js'
import { parseUpstreamArgs, startUpstream, upstreamUsage } from './upstream.js'

/** Where the command writes. */
export interface CliIo {
  readonly out: (text: string) => void
  readonly err: (text: string) => void
  /** `upstream` serves until this aborts. @default the process's SIGINT or SIGTERM */
  readonly until?: AbortSignal
}

const processIo: CliIo = {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
}

/** Runs the command with `argv` (without `node` and the script); resolves to the exit code. */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  const [command, ...rest] = argv
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    io.out(`${usage}\n\n${upstreamUsage}`)
    return command === undefined ? 2 : 0
  }
  if (command === 'upstream') return runUpstream(rest, io)
  if (command !== 'chaos') {
    io.err(`stream-boundary: unknown command "${command}"\n\n${usage}\n\n${upstreamUsage}`)
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

/** The process's SIGINT or SIGTERM, as a signal (its listeners removed once it fires). */
function interrupted(): AbortSignal {
  const controller = new AbortController()
  const stop = () => {
    process.off('SIGINT', stop)
    process.off('SIGTERM', stop)
    controller.abort()
  }
  process.on('SIGINT', stop)
  process.on('SIGTERM', stop)
  return controller.signal
}

/** `stream-boundary upstream`: serves until interrupted, then closes; resolves to the exit code. */
async function runUpstream(argv: readonly string[], io: CliIo): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    io.out(upstreamUsage)
    return 0
  }
  let options: ReturnType<typeof parseUpstreamArgs>
  try {
    options = parseUpstreamArgs(argv)
  } catch (error) {
    if (!(error instanceof UsageError)) throw error
    io.err(
      `stream-boundary upstream: ${error.message}\nRun "stream-boundary upstream --help" for usage.`,
    )
    return 2
  }
  const until = io.until ?? interrupted()
  const { upstream, lines } = await startUpstream(options)
  for (const line of lines) io.out(line)
  await new Promise<void>((resolve) => {
    if (until.aborted) resolve()
    else until.addEventListener('abort', () => resolve(), { once: true })
  })
  await upstream.close()
  return 0
}
