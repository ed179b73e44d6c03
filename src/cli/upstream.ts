/**
 * `stream-boundary upstream`: the fault-injecting upstream alone, on a port, to put behind a
 * gateway of one's own (its tests, a staging run, a manual `curl`). A request picks its
 * scenario with the `x-fault-scenario` header or the chaos marker in its prompt.
 *
 * @module
 */

import { checkScenarios, type Scenario } from '../testing/faults.js'
import { createFaultyUpstream, type FaultyUpstream } from '../testing/faulty-upstream.js'
import { parseFlags, UsageError } from './args.js'
import { type ChaosProtocol, chaosProtocols } from './client-request.js'
import { chaosAnswer, chaosReasoning, selectScenarios, upstreamScripts } from './scenarios.js'

/** Options of `stream-boundary upstream`. */
interface UpstreamOptions {
  /** @default 0 (any free port) */
  readonly port: number
  /** @default '127.0.0.1' */
  readonly host: string
  /** The protocol a gateway's SDK speaks to it: only how the base URL is printed. @default undefined */
  readonly protocol: ChaosProtocol | undefined
  /** The scenarios served, by name: the chosen chaos scenarios and every `--scenario`. */
  readonly scenarios: Readonly<Record<string, Scenario>>
}

/** The usage text of `stream-boundary upstream`. */
export const upstreamUsage = `Usage: stream-boundary upstream [--port <n>] [--protocol <protocol>] [options]

Serves the fault-injecting upstream alone: point your gateway's upstream at it and send
requests that name a scenario, with the x-fault-scenario header (your gateway must forward
it) or with the chaos marker [[sb-chaos scenario=<name> id=<request id>]] in the prompt.
Runs until interrupted (Ctrl-C).

  --port <n>              the port (default: any free port; the URL is printed)
  --host <address>        the address to bind (default: 127.0.0.1)
  --protocol <name>       ${chaosProtocols.join(' | ')}: print the base URL its SDK takes
                          (the upstream answers every protocol, picked from the path)
  --scenarios <list>      all, or a comma-separated list of chaos scenario names, each
                          played as stream-boundary chaos plays it (default: all)
  --scenario <name=faults> a scenario of your own: a comma-separated list of faults per
                          attempt, the last one repeating (repeatable), e.g. flaky=empty,ok
  --stall-ms <ms>         keepalives-only and role-only-then-stall stall this long, then end
                          (default: 20000; Infinity: endless)

A scenario counts its attempts per chaos-marker id, or per name for a header (so
x-fault-scenario: empty plays empty once, then ok). A name it does not serve is answered
400 naming it. Scenarios and faults: docs/testing.md and docs/chaos.md.`

/** `name=fault,fault` → a scenario, its faults checked as the upstream checks them. */
function ownScenario(value: string): [string, Scenario] {
  const at = value.indexOf('=')
  const name = at < 1 ? '' : value.slice(0, at).trim()
  const faults = value
    .slice(at + 1)
    .split(',')
    .map((fault) => fault.trim())
    .filter((fault) => fault !== '')
  if (!/^[A-Za-z0-9:._-]{1,100}$/.test(name) || faults.length === 0) {
    throw new UsageError(
      `--scenario must be name=fault,fault with a name of [A-Za-z0-9:._-], got "${value}"`,
    )
  }
  const scenario = faults as unknown as Scenario
  try {
    checkScenarios({ [name]: scenario })
  } catch (error) {
    throw new UsageError(`--scenario: ${(error as Error).message.replace(/^[^:]*: /, '')}`)
  }
  return [name, scenario]
}

/** Parses `upstream`'s arguments (after the word `upstream`). Throws {@link UsageError}. */
export function parseUpstreamArgs(argv: readonly string[]): UpstreamOptions {
  const values = parseFlags(argv, {
    port: { type: 'string' },
    host: { type: 'string' },
    protocol: { type: 'string' },
    scenarios: { type: 'string' },
    scenario: { type: 'string', multiple: true },
    'stall-ms': { type: 'string' },
  })
  const text = (name: string) => values[name] as string | undefined
  const port = Number(text('port') ?? '0')
  if (!Number.isSafeInteger(port) || port < 0 || port > 65_535 || text('port')?.trim() === '') {
    throw new UsageError(`--port must be an integer from 0 to 65535, got "${text('port')}"`)
  }
  const protocol = text('protocol')
  if (protocol !== undefined && !chaosProtocols.includes(protocol as ChaosProtocol)) {
    throw new UsageError(
      `--protocol must be one of ${chaosProtocols.join(', ')}, got "${protocol}"`,
    )
  }
  const stall = text('stall-ms')
  const stallMs = stall?.trim() === 'Infinity' ? Number.POSITIVE_INFINITY : Number(stall ?? 20_000)
  if (!(stallMs === Number.POSITIVE_INFINITY || (Number.isSafeInteger(stallMs) && stallMs >= 1))) {
    throw new UsageError(`--stall-ms must be an integer >= 1 or Infinity, got "${stall}"`)
  }
  let chosen: readonly { name: string }[]
  try {
    chosen = selectScenarios(text('scenarios') ?? 'all')
  } catch (error) {
    throw new UsageError((error as Error).message)
  }
  const scripts = upstreamScripts(stallMs)
  const own = ((values.scenario as string[] | undefined) ?? []).map(ownScenario)
  return {
    port,
    host: text('host') ?? '127.0.0.1',
    protocol: protocol as ChaosProtocol | undefined,
    scenarios: Object.fromEntries([
      ...chosen.map(({ name }): [string, Scenario] => [name, scripts[name] ?? ['ok']]),
      ...own,
    ]),
  }
}

/** The base URL a protocol's SDK takes for an upstream served at `url`. */
function sdkBase(url: string, protocol: ChaosProtocol): string {
  return protocol === 'openai-chat' || protocol === 'openai-responses' ? `${url}/v1` : url
}

/** Starts the upstream; resolves to it and the lines that tell how to use it. */
export async function startUpstream(
  options: UpstreamOptions,
): Promise<{ upstream: FaultyUpstream; url: string; lines: string[] }> {
  const upstream = createFaultyUpstream({
    scenarios: options.scenarios,
    text: chaosAnswer,
    reasoning: chaosReasoning,
  })
  const url = await upstream.listen({ port: options.port, host: options.host })
  const names = Object.keys(options.scenarios)
  const lines = [
    `faulty upstream listening on ${url}`,
    ...(options.protocol === undefined
      ? []
      : [`${options.protocol} base URL: ${sdkBase(url, options.protocol)}`]),
    `scenarios (${names.length}): ${names.join(', ')}`,
    'pick one per request: the header x-fault-scenario: <name>, or [[sb-chaos scenario=<name> id=<request id>]] in the prompt',
  ]
  return { upstream, url, lines }
}
