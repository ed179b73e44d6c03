/**
 * The `stream-boundary chaos` command line: one defaults object, checked up front with
 * messages that name the flag.
 *
 * @module
 */

import { parseArgs } from 'node:util'
import type { KeySelection } from '../key-pool/selection.js'
import { maxTimerDelayMs } from '../options.js'
import { type ChaosProtocol, chaosProtocols } from './client-request.js'
import { type ChaosScenario, expectingContinuation, selectScenarios } from './scenarios.js'

/** Options of a chaos run. */
export interface ChaosOptions {
  /** The gateway's base URL, as an SDK takes it (required). */
  readonly target: string
  /** The protocol the client speaks (required). */
  readonly protocol: ChaosProtocol
  /** A command that starts the gateway; `{upstream}` becomes the upstream's URL. @default undefined */
  readonly gateway: string | undefined
  /** Port of the faulty upstream on 127.0.0.1. @default 0 (an ephemeral port) */
  readonly upstreamPort: number
  /** The scenarios to run. @default all */
  readonly scenarios: readonly ChaosScenario[]
  /** Requests in flight at once. @default 4 in scenario mode, 1 in load mode */
  readonly concurrency: number
  /** Load mode: this many requests with a random fault mix. @default undefined (scenario mode) */
  readonly requests: number | undefined
  /** Load mode: the share of requests that meet a fault first. @default 0.2 */
  readonly faultRate: number
  /** Load mode: the seed of the fault mix. @default 1 */
  readonly seed: number
  /**
   * No end within this many ms is a hang. Above the library's 30 s first-byte default, so a
   * gateway at stream-boundary's defaults answers the hang scenarios within it.
   * @default 45000
   */
  readonly hangMs: number
  /**
   * How long `keepalives-only` and `role-only-then-stall` stall before a clean end of the body
   * (`Infinity`: endless, bounded only by the gateway's first-output timeout; raise `hangMs`
   * above that timeout then). `0` is a usage error, as it is for every bound. @default 20000
   */
  readonly stallMs: number
  /** How long a started gateway may take to accept connections. @default 20000 */
  readonly startTimeoutMs: number
  /** Extra request headers (`name: value`), e.g. the gateway's own auth. @default [] */
  readonly headers: Readonly<Record<string, string>>
  /** Print JSON instead of a table. @default false */
  readonly json: boolean
  /**
   * What fails the run: `any` ✗ (a scenario whose client did not get what it should), or
   * only `silent` failures, duplicates and hangs. Load mode has no expectations: both mean
   * the latter there.
   * @default 'any'
   */
  readonly failOn: 'any' | 'silent'
  /**
   * Scenario mode: a folder to write what each scenario's client got into
   * (`<scenario>.json`: status, headers, how it ended, the verdict; `<scenario>.body`: the
   * bytes). @default undefined (nothing written)
   */
  readonly dump: string | undefined
  /** The model the client asks for (some gateways route on it). @default 'chaos-model' */
  readonly model: string | undefined
  /**
   * The endpoint path, appended to `target` in place of the protocol's usual one (a gateway
   * with routes of its own). @default undefined (the protocol's path)
   */
  readonly path: string | undefined
  /**
   * The gateway continues a cut answer (stream-boundary's `continueAfterCut`): the scenarios
   * that cut an answer after output (`partial-then-cut`, `eof-mid-frame`) expect it whole.
   * @default false
   */
  readonly expectContinuation: boolean
  /**
   * The key selection the started gateway is asked to use: `{selection}` in `--gateway` is
   * replaced with it, and the gateway's environment gets `KEY_SELECTION`. Needs `--gateway`.
   * @default undefined (the gateway's own choice)
   */
  readonly selection: KeySelection | undefined
}

/** Every selection a pool may be asked for: a table the compiler keeps complete. */
const selections = Object.keys({
  'round-robin': true,
  weighted: true,
  'least-inflight': true,
  headroom: true,
  fastest: true,
} satisfies Record<KeySelection, true>) as KeySelection[]

/** Defaults of {@link ChaosOptions}. */
const chaosDefaults = Object.freeze({
  upstreamPort: 0,
  scenarios: 'all',
  /** Scenarios run this many at a time, so a longer hang bound stays affordable. */
  scenarioConcurrency: 4,
  /** Load mode: requests in flight at once, unless `--concurrency` says. */
  concurrency: 1,
  faultRate: 0.2,
  seed: 1,
  hangMs: 45_000,
  stallMs: 20_000,
  startTimeoutMs: 20_000,
  json: false,
  failOn: 'any' as const,
})

/** A command line the command cannot run; exit code 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError' as const
}

/** The usage text. */
export const usage = `Usage: stream-boundary chaos --target <url> --protocol <protocol> [options]

Fault-tests an LLM gateway: a fault-injecting upstream on 127.0.0.1 goes behind it, and a
client in front of it judges what came out.

  --target <url>          the gateway's base URL, as an SDK takes it (OpenAI: http://host/v1)
  --protocol <name>       ${chaosProtocols.join(' | ')}
  --gateway <command>     start the gateway: {upstream} is replaced with the upstream's URL
  --upstream-port <n>     the upstream's port on 127.0.0.1 (default: any free port)
  --scenarios <list>      all, or a comma-separated list of scenario names (default: all)
  --concurrency <n>       requests in flight at once (default: 4 scenarios at a time, 1
                          in load mode)
  --requests <n>          load mode: n requests with a random fault mix
  --fault-rate <0..1>     load mode: share of requests that meet a fault (default: 0.2)
  --seed <n>              load mode: seed of the fault mix (default: 1)
  --hang-ms <ms>          no end within this bound is a hang (default: 45000, above a
                          30 s first-byte timeout and a retry)
  --stall-ms <ms>         keepalives-only and role-only-then-stall stall this long, then end
                          cleanly with no output (default: 20000; Infinity: endless, bounded
                          only by the gateway's first-output timeout: raise --hang-ms above it)
  --start-timeout-ms <ms> how long the started gateway may take to listen (default: 20000)
  --header <name: value>  an extra request header (repeatable)
  --json                  print JSON instead of a table
  --fail-on <any|silent>  fail on any ✗, or only on silent failures, duplicates and hangs
                          (default: any)
  --model <name>          the model the client asks for (default: chaos-model)
  --dump <dir>            write what each scenario's client got (status, headers, bytes,
                          verdict) into <dir>
  --path <path>           the endpoint path after --target, in place of the protocol's own
                          (e.g. /api/chat for a gateway with routes of its own)
  --expect-continuation   the gateway continues a cut answer (continueAfterCut): partial-then-cut
                          and eof-mid-frame expect the whole answer
  --selection <name>      ask the started gateway for a key selection (${selections.join(', ')}):
                          {selection} in --gateway is replaced with it, and the gateway gets
                          KEY_SELECTION in its environment (needs --gateway)

{upstream} in --target, --header and --gateway is replaced with the faulty upstream's URL.
The upstream serves every protocol, picking it from the request path, so a translating
gateway (Anthropic clients in front of an OpenAI upstream, say) is tested by pointing its
upstream at {upstream}/v1 and the client at its own protocol.

Exit code: 0 all good; 1 a ✗ (with --fail-on silent: a silent failure, duplicate output or
hang); 2 bad arguments or the gateway could not be reached; 3 nothing was judged (every
scenario n/a: the gateway never called the upstream; most often the variable it reads its
upstream URL from never got {upstream}, else the target path or protocol is wrong).`

function integer(
  flag: string,
  value: string | undefined,
  fallback: number,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (value === undefined) return fallback
  const n = value.trim() === '' ? Number.NaN : Number(value)
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`
    throw new UsageError(`--${flag} must be an integer ${range}, got "${value}"`)
  }
  return n
}

/**
 * A bound in milliseconds: an integer from 1 to `setTimeout`'s limit, or `Infinity` for none
 * (the library's one rule).
 */
function boundMs(flag: string, value: string | undefined, fallback: number): number {
  if (value?.trim() === 'Infinity') return Number.POSITIVE_INFINITY
  const n = value === undefined || value.trim() === '' ? Number.NaN : Number(value)
  if (value !== undefined && (!Number.isSafeInteger(n) || n < 1 || n > maxTimerDelayMs)) {
    throw new UsageError(
      `--${flag} must be an integer from 1 to ${maxTimerDelayMs} or Infinity, got "${value}"`,
    )
  }
  return value === undefined ? fallback : n
}

function endpointPath(value: string | undefined): string | undefined {
  if (value === undefined) return undefined
  if (!value.startsWith('/')) throw new UsageError(`--path must start with /, got "${value}"`)
  return value
}

function selectionOf(
  value: string | undefined,
  gateway: string | undefined,
): KeySelection | undefined {
  if (value === undefined) return undefined
  if (!selections.includes(value as KeySelection))
    throw new UsageError(`--selection must be one of ${selections.join(', ')}, got "${value}"`)
  if (gateway === undefined)
    throw new UsageError(
      '--selection needs --gateway: it is handed to the started gateway as KEY_SELECTION and {selection}',
    )
  return value as KeySelection
}

function failOn(value: string | undefined): 'any' | 'silent' {
  if (value === undefined) return chaosDefaults.failOn
  if (value !== 'any' && value !== 'silent')
    throw new UsageError(`--fail-on must be any or silent, got "${value}"`)
  return value
}

function parseHeaders(values: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = {}
  for (const [headerIndex, value] of values.entries()) {
    const at = value.indexOf(':')
    const name = at < 1 ? '' : value.slice(0, at).trim()
    // Neither the value nor a bad name is echoed: either may hold a credential.
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name))
      throw new UsageError(
        `--header must be "name: value" with a token for a name (header ${headerIndex + 1} is not)`,
      )
    headers[name.toLowerCase()] = value.slice(at + 1).trim()
  }
  return headers
}

/** The values of a command's `--flags` (no positionals, no unknown flag). Throws {@link UsageError}. */
export function parseFlags(
  argv: readonly string[],
  options: NonNullable<Parameters<typeof parseArgs>[0]>['options'],
): Record<string, string | boolean | (string | boolean)[] | undefined> {
  try {
    return parseArgs({ args: [...argv], strict: true, allowPositionals: false, options }).values
  } catch (error) {
    throw new UsageError((error as Error).message)
  }
}

/** Parses `chaos`'s arguments (after the word `chaos`). Throws {@link UsageError}. */
export function parseChaosArgs(argv: readonly string[]): ChaosOptions {
  const values = parseFlags(argv, {
    target: { type: 'string' },
    protocol: { type: 'string' },
    gateway: { type: 'string' },
    'upstream-port': { type: 'string' },
    scenarios: { type: 'string' },
    concurrency: { type: 'string' },
    requests: { type: 'string' },
    'fault-rate': { type: 'string' },
    seed: { type: 'string' },
    'hang-ms': { type: 'string' },
    'stall-ms': { type: 'string' },
    'start-timeout-ms': { type: 'string' },
    header: { type: 'string', multiple: true },
    json: { type: 'boolean' },
    'fail-on': { type: 'string' },
    model: { type: 'string' },
    dump: { type: 'string' },
    path: { type: 'string' },
    'expect-continuation': { type: 'boolean' },
    selection: { type: 'string' },
  })
  const text = (name: string) => values[name] as string | undefined
  const target = text('target')
  if (target === undefined) throw new UsageError("--target is required (the gateway's base URL)")
  let url: URL
  try {
    url = new URL(target.replaceAll('{upstream}', 'http://127.0.0.1:1'))
  } catch {
    throw new UsageError(`--target must be an http:// URL, got "${target}"`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UsageError(`--target must be an http:// URL, got "${target}"`)
  const protocol = text('protocol')
  if (!chaosProtocols.includes(protocol as ChaosProtocol))
    throw new UsageError(
      `--protocol must be one of ${chaosProtocols.join(', ')}, got ${protocol === undefined ? 'nothing' : `"${protocol}"`}`,
    )
  let scenarios: readonly ChaosScenario[]
  try {
    scenarios = selectScenarios(text('scenarios') ?? chaosDefaults.scenarios)
  } catch (error) {
    throw new UsageError((error as Error).message)
  }
  const faultRateText = text('fault-rate')
  const faultRate = faultRateText === undefined ? chaosDefaults.faultRate : Number(faultRateText)
  if (!(faultRate >= 0 && faultRate <= 1))
    throw new UsageError(`--fault-rate must be a number from 0 to 1, got "${faultRateText}"`)
  const gateway = text('gateway')
  if (gateway !== undefined && gateway.trim() === '')
    throw new UsageError('--gateway must be a command, got an empty string')
  const requestsText = text('requests')
  return {
    target: target.replace(/\/+$/, ''),
    protocol: protocol as ChaosProtocol,
    gateway,
    upstreamPort: integer(
      'upstream-port',
      text('upstream-port'),
      chaosDefaults.upstreamPort,
      0,
      65_535,
    ),
    scenarios:
      values['expect-continuation'] === true ? expectingContinuation(scenarios) : scenarios,
    concurrency: integer(
      'concurrency',
      text('concurrency'),
      requestsText === undefined ? chaosDefaults.scenarioConcurrency : chaosDefaults.concurrency,
      1,
    ),
    requests: requestsText === undefined ? undefined : integer('requests', requestsText, 1, 1),
    faultRate,
    seed: integer('seed', text('seed'), chaosDefaults.seed, 0),
    hangMs: integer('hang-ms', text('hang-ms'), chaosDefaults.hangMs, 100, maxTimerDelayMs),
    stallMs: boundMs('stall-ms', text('stall-ms'), chaosDefaults.stallMs),
    startTimeoutMs: integer(
      'start-timeout-ms',
      text('start-timeout-ms'),
      chaosDefaults.startTimeoutMs,
      100,
      maxTimerDelayMs,
    ),
    headers: parseHeaders((values.header as string[] | undefined) ?? []),
    json: values.json === true,
    failOn: failOn(text('fail-on')),
    model: text('model'),
    dump: text('dump'),
    path: endpointPath(text('path')),
    expectContinuation: values['expect-continuation'] === true,
    selection: selectionOf(text('selection'), gateway),
  }
}
