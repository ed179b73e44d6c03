/**
 * Why a chaos run judged nothing (exit 3: the gateway never called the upstream), in words a
 * user can act on. The usual cause is not the target path but a gateway whose upstream variable
 * never got `{upstream}`: it answered from its own default upstream.
 *
 * @module
 */

import type { ChaosOptions } from './args.js'

/** The variables a `--gateway` command sets to a value holding `{upstream}`. */
function upstreamVariables(command: string): string[] {
  return [...command.matchAll(/\b([A-Za-z_][A-Za-z0-9_]*)=["']?[^\s"']*\{upstream\}/g)].map(
    ([, name]) => name ?? '',
  )
}

const pathHint =
  'the target path (OpenAI bases end in /v1, Anthropic and Gemini take the bare host) and --protocol'

/** The likely cause of a run in which nothing was judged, and what to check. */
export function nothingJudgedCause(
  options: Pick<ChaosOptions, 'gateway'>,
  upstream: string,
): string {
  const head = 'nothing was judged: the gateway never called the upstream.'
  if (options.gateway === undefined) {
    return `${head} Check that the gateway's upstream URL is the faulty upstream's (${upstream}; --upstream-port fixes its port), then ${pathHint}.`
  }
  if (!options.gateway.includes('{upstream}')) {
    return `${head} The --gateway command has no {upstream}, so the gateway called its own upstream: set the variable it reads its upstream URL from to {upstream} (README use 1: UPSTREAM_URL={upstream}/v1). Else check ${pathHint}.`
  }
  const names = upstreamVariables(options.gateway)
  const set = names.length === 0 ? '{upstream}' : names.join(', ')
  return `${head} Most likely the gateway's upstream variable never got {upstream}: the command sets ${set}; check that the gateway reads ${names.length === 1 ? 'that variable' : 'one of them'} for its upstream URL (README use 1 reads UPSTREAM_URL, examples/node-http-gateway.ts UPSTREAM_OPENAI_URL and UPSTREAM_ANTHROPIC_URL). Else check ${pathHint}.`
}
