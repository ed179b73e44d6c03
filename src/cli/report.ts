/**
 * The chaos scorecard as text: a table of scenarios (or the load figures) and one summary line.
 *
 * @module
 */

import type { ChaosReport, ScenarioResult } from './run.js'

const ms = (value: number | null) => (value === null ? '-' : `${Math.round(value)} ms`)
const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`

function table(rows: readonly (readonly string[])[]): string[] {
  const widths = (rows[0] ?? []).map((_, column) =>
    Math.max(...rows.map((row) => row[column]?.length ?? 0)),
  )
  const line = (row: readonly string[]) =>
    row
      .map((cell, column) => cell.padEnd(widths[column] ?? 0))
      .join('  ')
      .trimEnd()
  const [head, ...body] = rows
  return head === undefined
    ? []
    : [line(head), line(widths.map((width) => '─'.repeat(width))), ...body.map(line)]
}

function scenarioRows(results: readonly ScenarioResult[]): string[] {
  const ok = results.find((result) => result.name === 'ok')
  const versus = (result: ScenarioResult) =>
    ok?.firstTokenMs == null || result.firstTokenMs === null || result === ok
      ? ''
      : ` (${result.firstTokenMs >= ok.firstTokenMs ? '+' : ''}${Math.round(result.firstTokenMs - ok.firstTokenMs)})`
  return table([
    [
      '',
      'scenario',
      'expect',
      'attempts',
      'first byte',
      'first token (vs ok)',
      'what the client got',
    ],
    ...results.map((result) => [
      result.mark,
      result.name,
      result.expect,
      String(result.attempts),
      ms(result.firstByteMs),
      `${ms(result.firstTokenMs)}${versus(result)}`,
      result.reason,
    ]),
  ])
}

function loadRows(report: ChaosReport): string[] {
  const load = report.load
  if (load === null) return []
  const { counts } = report
  const memory = load.gatewayMemory
  const rows: [string, string][] = [
    [
      'requests',
      `${counts.requests} (${load.concurrency} at once, ${Math.round(load.faultRate * 100)} % faults, seed ${load.seed}, ${load.requestsPerSecond}/s)`,
    ],
    ['answered', String(counts.answered)],
    ['honest errors', String(counts.honestErrors)],
    ['silent failures', String(counts.silentFailures)],
    ['duplicates', String(counts.duplicates)],
    ['hangs', String(counts.hangs)],
    [
      'upstream attempts per request',
      `${load.attemptsPerRequest.mean} mean, ${load.attemptsPerRequest.max} max`,
    ],
    ['time to first token', `p50 ${ms(load.firstTokenMs.p50)}, p99 ${ms(load.firstTokenMs.p99)}`],
  ]
  if (memory !== null)
    rows.push([
      'gateway RSS',
      `${mib(memory.startRssBytes)} at start, ${mib(memory.peakRssBytes)} peak, ${mib(memory.endRssBytes)} after`,
    ])
  for (const example of load.badExamples) rows.push([`  e.g. ${example.fault}`, example.reason])
  const faults = Object.entries(load.byFault).map(([name, c]) => [
    name,
    String(c.requests),
    String(c.answered),
    String(c.honestErrors),
    String(c.silentFailures),
    String(c.duplicates),
    String(c.hangs),
    String(c.missed),
  ])
  return [
    ...table([['load', ''], ...rows]),
    '',
    ...table([
      ['fault', 'requests', 'answered', 'honest', 'silent', 'duplicate', 'hang', 'missed'],
      ...faults,
    ]),
  ]
}

/** The one-line verdict that ends the output (and a hint when nothing was judged). */
function summaryLines(report: ChaosReport): string[] {
  const { counts, marks } = report
  const verdict = report.exitCode === 0 ? 'PASS' : 'FAIL'
  const scored =
    report.mode === 'scenarios' ? `${marks['✓']} ✓, ${marks['✗']} ✗, ${marks['n/a']} n/a; ` : ''
  const lines = [
    `${verdict}: ${scored}${counts.requests} requests, ${counts.answered} answered, ${counts.honestErrors} honest errors, ${counts.silentFailures} silent failures, ${counts.duplicates} duplicates, ${counts.hangs} hangs (${(report.durationMs / 1000).toFixed(1)} s)`,
  ]
  if (counts.hangs > 0) {
    lines.push(
      `${counts.hangs} hang${counts.hangs === 1 ? '' : 's'} at the hang bound (${report.hangMs} ms): a gateway whose own timeouts are longer needs --hang-ms above them (stream-boundary's defaults: 30 s to the first byte, 10 min to the first output; with --stall-ms Infinity the stalls end only at the gateway's first-output timeout).`,
    )
  }
  if (report.exitCode === 3) {
    lines.push(
      report.nothingJudged ??
        'nothing was judged: the gateway never called the upstream. Check the target path (OpenAI bases end in /v1, Anthropic and Gemini take the bare host) and --protocol.',
    )
  }
  return lines
}

/** The scorecard, as lines. */
export function formatReport(report: ChaosReport): string {
  const body = report.mode === 'scenarios' ? scenarioRows(report.scenarios) : loadRows(report)
  const legend =
    report.mode === 'scenarios'
      ? ['', '✓ what a client should get   ✗ it did not   n/a the scenario could not apply']
      : []
  return [
    `stream-boundary chaos: ${report.target} (${report.protocol}${report.selection === undefined ? '' : `, key selection ${report.selection}`})`,
    '',
    ...body,
    ...legend,
    '',
    ...summaryLines(report),
  ].join('\n')
}
