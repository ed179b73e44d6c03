/**
 * The run's summary: each target of issue #45 beside the figure this run measured and whether
 * it was met (the table the README's performance section copies).
 */

import type { HttpResult } from './http.js'
import type { RuntimesResult } from './runtimes.js'

/** What the summary reads; a benchmark left out of the run leaves its figures undefined. */
export interface SummaryInputs {
  /** 200-frame streams (bench/http.ts). */
  readonly http?: HttpResult
  /** 1-frame answers (bench/http.ts). */
  readonly httpOneFrame?: HttpResult
  readonly runtimes?: RuntimesResult
  /** CPU per request with OpenTelemetry on, % over off (the OTel benchmark's figure). */
  readonly otelIncreasePercent?: number
  /** Promises the library creates per 1-frame `relay()` + `webSink()` request (bench/promises.ts). */
  readonly promisesPerRequest?: number
  /**
   * CPU per 1-frame request of a relay built with a large policy over one with the defaults,
   * both through `createRelay()` (bench/policy-cost.ts).
   */
  readonly policyCostRatio?: number
}

interface Row {
  readonly figure: string
  readonly value: number | undefined
  /** How the value prints. */
  readonly unit: 'x' | '%' | 'KiB' | 'MiB' | 'count'
  /** The target (a ceiling); undefined for a figure reported without one. */
  readonly target?: number
}

function rows(inputs: SummaryInputs): Row[] {
  const { http, httpOneFrame: one, runtimes } = inputs
  const perRequest = (side: 'gateway' | 'gatewayFetch') =>
    one === undefined ? undefined : one[side].cpuUsPerRequest / one.raw.cpuUsPerRequest
  const bun = runtimes?.bun
  return [
    {
      figure: 'CPU per request (1-frame answers), default attempt, × raw pipe',
      value: perRequest('gateway'),
      unit: 'x',
      target: 2,
    },
    {
      figure: 'fetch attempts, CPU per request × node:http attempts',
      value:
        one === undefined
          ? undefined
          : one.gatewayFetch.cpuUsPerRequest / one.gateway.cpuUsPerRequest,
      unit: 'x',
      target: 1.3,
    },
    {
      figure: 'TTFB p50 (1-frame answers), × raw pipe',
      value: one?.ttfbP50Ratio,
      unit: 'x',
      target: 1.5,
    },
    {
      figure: `CPU per frame (${http?.framesPerRequest ?? 200}-frame streams), × raw pipe`,
      value: http?.cpuRatio,
      unit: 'x',
      target: 1.35,
    },
    {
      figure: 'OpenTelemetry on, CPU per request over off',
      value: inputs.otelIncreasePercent,
      unit: '%',
      target: 25,
    },
    {
      figure: 'promises the library creates per 1-frame request, relay() + webSink()',
      value: inputs.promisesPerRequest,
      unit: 'count',
      target: 40,
    },
    {
      figure:
        'a large policy (hedging, continuation, fallback, hooks, every bound), CPU per 1-frame request × the defaults, createRelay() in process',
      value: inputs.policyCostRatio,
      unit: 'x',
      target: 1.1,
    },
    {
      figure: 'built gateway RSS after warm-up, × raw pipe',
      value: runtimes?.rssRatio,
      unit: 'x',
      target: 1.4,
    },
    {
      figure: `built gateway RSS after warm-up and ${(runtimes?.settleMs ?? 0) / 1000} s idle, × raw pipe`,
      value: runtimes?.settledRssRatio,
      unit: 'x',
      target: 1.4,
    },
    {
      figure: 'heap per idle stream, built gateway (raw pipe beside it)',
      value: runtimes?.node.heapBytesPerIdleStream,
      unit: 'KiB',
    },
    {
      figure: 'heap per idle stream, raw pipe',
      value: runtimes?.raw.heapBytesPerIdleStream,
      unit: 'KiB',
    },
    {
      figure: 'Bun: CPU per request (1-frame), × the gateway on Node',
      value:
        bun === undefined
          ? undefined
          : bun.cpuUsPerRequest / (runtimes as RuntimesResult).node.cpuUsPerRequest,
      unit: 'x',
    },
    {
      figure: 'Bun: CPU per frame, × the gateway on Node',
      value:
        bun === undefined
          ? undefined
          : bun.cpuUsPerFrame / (runtimes as RuntimesResult).node.cpuUsPerFrame,
      unit: 'x',
    },
    {
      figure: 'Bun: TTFB p50, × the gateway on Node',
      value:
        bun === undefined ? undefined : bun.ttfbP50Ms / (runtimes as RuntimesResult).node.ttfbP50Ms,
      unit: 'x',
    },
    { figure: 'Bun: RSS after warm-up', value: bun?.warm.rss, unit: 'MiB' },
  ]
}

function shown(value: number, unit: Row['unit']): string {
  if (unit === 'x') return `${value.toFixed(2)}×`
  if (unit === '%') return `+${value.toFixed(0)} %`
  if (unit === 'count') return value.toFixed(1)
  if (unit === 'KiB') return `${(value / 1024).toFixed(1)} KiB`
  return `${(value / 1024 / 1024).toFixed(1)} MiB`
}

/** Prints the summary table; its rows, for the results file. */
export function printSummary(
  inputs: SummaryInputs,
): { figure: string; value?: number; target?: number; met?: boolean }[] {
  console.log('\n### Summary: each figure beside its goal in this run\n')
  console.log('| figure | this run | target | met |')
  console.log('| --- | ---: | ---: | :---: |')
  return rows(inputs).map(({ figure, value, unit, target }) => {
    const met = value === undefined || target === undefined ? undefined : value <= target
    const targetText = target === undefined ? '–' : `≤ ${shown(target, unit)}`
    const metText =
      met === undefined
        ? value === undefined && target !== undefined
          ? 'not measured'
          : '–'
        : met
          ? 'yes'
          : 'no'
    console.log(
      `| ${figure} | ${value === undefined ? 'not measured' : shown(value, unit)} | ${targetText} | ${metText} |`,
    )
    return {
      figure,
      ...(value === undefined ? {} : { value }),
      ...(target === undefined ? {} : { target }),
      ...(met === undefined ? {} : { met }),
    }
  })
}
