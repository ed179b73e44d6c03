/**
 * The summary of the fleet benchmarks: each target of issue #55 beside the figure this run
 * measured and whether it was met.
 */

import { type FleetLatencyResult, p95Change } from './fleet-latency.js'
import type { FleetReplicasResult } from './fleet-replicas.js'
import { type FleetScaleResult, scaleRatios } from './fleet-scale.js'

/** What the summary reads; a part left out of the run leaves its figures undefined. */
export interface FleetSummaryInputs {
  readonly scale?: FleetScaleResult
  readonly replicas?: FleetReplicasResult
  readonly latency?: FleetLatencyResult
}

interface Row {
  readonly figure: string
  readonly value: number | undefined
  readonly unit: 'x' | '%' | 'req/s' | '‰'
  readonly target?: number
  /** The target is a floor (default: a ceiling). */
  readonly atLeast?: boolean
}

function scaleRows(scale: FleetScaleResult | undefined): Row[] {
  if (scale === undefined) return []
  const small = scale.sizes[0]
  const large = scale.sizes.at(-1)
  const rows: Row[] = []
  const ratios = scaleRatios(scale)
  for (const r of ratios.filter((r) => r.pool === 'memory')) {
    rows.push({
      figure: `memory pool, ${r.selection}: CPU per request, ${large} keys ÷ ${small} (${r.path === 'pool' ? 'acquire → commit → report' : 'through relay()'})`,
      value: r.cpu,
      unit: 'x',
      target: 1.2,
    })
  }
  for (const r of ratios.filter((r) => r.pool === 'redis' && r.path === 'pool')) {
    rows.push({
      figure: `Redis pool, ${r.selection}: Redis time per request (INFO commandstats), ${large} keys ÷ ${small}`,
      value: r.redis,
      unit: 'x',
      target: 2,
    })
  }
  return rows
}

function replicaRows(replicas: FleetReplicasResult | undefined): Row[] {
  if (replicas === undefined) return []
  return replicas.rows.map((row) => ({
    figure: `${replicas.replicas} replicas, ${replicas.keys} keys, ${row.selection}, ${row.redis}: requests/s sustained`,
    value: row.requestsPerSecond,
    unit: 'req/s',
    target: 2000,
    atLeast: true,
  }))
}

function latencyRows(latency: FleetLatencyResult | undefined): Row[] {
  if (latency === undefined) return []
  const rows: Row[] = []
  for (const scenario of ['slow key, even pace', 'slow key, bursts'] as const) {
    const change = p95Change(latency, scenario)
    rows.push({
      figure: `fastest, one key 3× slower (${scenario.slice('slow key, '.length)}): p95 time to first token vs round-robin`,
      value: change === undefined ? undefined : 100 * change,
      unit: '%',
      target: -40,
    })
  }
  for (const row of latency.rows.filter((r) => r.scenario === 'load 40 % → 120 %')) {
    rows.push({
      figure: `load 40 % → 120 % of capacity, ${row.selection} (${row.pool}): upstream 429s per 1,000 requests`,
      value: row.upstream429PerThousand,
      unit: '‰',
      ...(row.selection === 'headroom' ? { target: 10 } : {}),
    })
  }
  return rows
}

function shown(value: number, unit: Row['unit']): string {
  if (unit === 'x') return `${value.toFixed(2)}×`
  if (unit === '%') return `${value > 0 ? '+' : ''}${value.toFixed(0)} %`
  if (unit === 'req/s') return `${value.toFixed(0)} req/s`
  return `${value.toFixed(1)} per 1,000`
}

/** Prints the summary table; its rows, for the results file. */
export function printFleetSummary(
  inputs: FleetSummaryInputs,
): { figure: string; value?: number; target?: number; met?: boolean }[] {
  console.log('\n### Summary: the #55 targets (fleet scale, replicas, bursts) in this run\n')
  console.log('| figure | this run | target | met |')
  console.log('| --- | ---: | ---: | :---: |')
  const rows = [
    ...scaleRows(inputs.scale),
    ...replicaRows(inputs.replicas),
    ...latencyRows(inputs.latency),
  ]
  return rows.map(({ figure, value, unit, target, atLeast }) => {
    const met =
      value === undefined || Number.isNaN(value) || target === undefined
        ? undefined
        : atLeast === true
          ? value >= target
          : value <= target
    const targetText =
      target === undefined ? '–' : `${atLeast === true ? '≥' : '≤'} ${shown(target, unit)}`
    const measured =
      value === undefined || Number.isNaN(value) ? 'not measured' : shown(value, unit)
    console.log(
      `| ${figure} | ${measured} | ${targetText} | ${met === undefined ? '–' : met ? 'yes' : 'no'} |`,
    )
    return {
      figure,
      ...(value === undefined ? {} : { value }),
      ...(target === undefined ? {} : { target }),
      ...(met === undefined ? {} : { met }),
    }
  })
}
