/**
 * The chaos scenarios: which faults the upstream plays for one request, attempt by attempt,
 * and what a client of a good gateway should get.
 *
 * @module
 */

import type { FaultKind, Scenario } from '../testing/faults.js'

/** What a client should get. */
type Expectation =
  /** The whole answer: the fault came before any output, so a retry was still possible. */
  | 'answer'
  /** The whole answer, or an honest error: output had already been sent when the fault hit. */
  | 'answer-or-error'
  /** An honest error: every attempt fails. */
  | 'error'

/** What the client does while reading. */
export type ClientAction = 'read' | 'disconnect' | 'pause'

/** One chaos scenario. */
export interface ChaosScenario {
  readonly name: string
  /** Faults per upstream attempt; the last one repeats. */
  readonly script: Scenario
  readonly expect: Expectation
  readonly client: ClientAction
  /** One line: what happens and what a client should get. */
  readonly summary: string
  /** Answer texts besides the normal one that count as the answer (`oversized-frame`). */
  readonly otherAnswers?: (answer: string) => readonly string[]
}

/** The text of the answer the upstream plays. */
export const chaosAnswer = 'The quick brown fox jumps over the lazy dog.'
/** The reasoning of `thinking-only`. */
export const chaosReasoning = 'Let me think about this step by step.'

const pre = (name: string, fault: Scenario[number], summary: string): ChaosScenario => ({
  name,
  script: [fault, 'ok'],
  expect: 'answer',
  client: 'read',
  summary: `${summary}, then a good attempt: a retry is still possible, the client should get the answer`,
})

/** Every scenario, in the order the scorecard lists them. */
export const chaosScenarios: readonly ChaosScenario[] = [
  {
    name: 'ok',
    script: ['ok'],
    expect: 'answer',
    client: 'read',
    summary: 'a healthy stream: the baseline for attempts and first-token time',
  },
  pre('empty', 'empty', '200 and a clean EOF with no frames (tunnel killed in prefill)'),
  pre('hang-before-headers', 'hang-before-headers', 'no response headers at all'),
  pre('headers-then-hang', 'headers-then-hang', '200 headers, then nothing'),
  pre(
    'keepalives-only',
    'keepalives-only',
    'keep-alive comments only (for --stall-ms, then a clean end: keep-alives are not output)',
  ),
  pre(
    'role-only-then-stall',
    'role-only-then-stall',
    'the role-only preamble, then silence (for --stall-ms, then a clean end: a preamble is not output)',
  ),
  pre('error-frame', 'error-frame', 'a retryable error frame before any output'),
  pre('rate-limited', { kind: 'rate-limited', retryAfterSeconds: 1 }, '429 with retry-after: 1'),
  pre('overloaded', 'overloaded', '529 overloaded'),
  pre('html-500', 'html-500', 'a 500 HTML page'),
  pre('json-error-200', 'json-error-200', 'a JSON error body with status 200'),
  pre('html-200', 'html-200', 'an HTML page with status 200'),
  {
    name: 'thinking-only',
    script: ['thinking-only', 'ok'],
    expect: 'answer-or-error',
    client: 'read',
    summary:
      'reasoning, then EOF with no answer: the reasoning went out, so the answer (never both attempts), the reasoning promoted to the answer, or an honest error',
  },
  {
    ...pre('oversized-frame', 'oversized-frame', 'one 2 MiB text frame'),
    expect: 'answer-or-error',
    summary:
      'one 2 MiB text frame: the client should get it whole, a good answer, or an honest error',
    otherAnswers: () => ['x'.repeat(2 * 1024 * 1024)],
  },
  {
    name: 'streaming-unsupported',
    script: ['streaming-unsupported'],
    expect: 'answer-or-error',
    client: 'read',
    summary:
      'the endpoint refuses streaming (404) and only answers plain requests: the answer (non-streaming fallback) or an honest error',
  },
  {
    name: 'slow-drip',
    script: [{ kind: 'slow-drip', delayMs: 50 }],
    expect: 'answer',
    client: 'read',
    summary: 'frames 50 ms apart: the client should get the whole answer',
  },
  {
    name: 'no-final-blank-line',
    script: ['no-final-blank-line'],
    expect: 'answer',
    client: 'read',
    summary: 'the last frame lacks its blank line: the client should get the whole answer',
  },
  {
    name: 'invalid-utf8',
    script: ['invalid-utf8'],
    expect: 'answer-or-error',
    client: 'read',
    summary:
      'two bytes that are not UTF-8 in the last delta: the answer (bytes replaced) or an honest error',
    otherAnswers: (answer) => {
      const at = answer.lastIndexOf(' ') + 1
      return [`${answer.slice(0, at)}\uFFFD\uFFFD${answer.slice(at)}`]
    },
  },
  {
    name: 'partial-then-cut',
    script: ['partial-then-cut', 'ok'],
    expect: 'answer-or-error',
    client: 'read',
    summary:
      'half the answer, then a clean EOF with no end event: output went out, so an honest error (never a cut answer)',
  },
  {
    name: 'eof-mid-frame',
    script: ['eof-mid-frame', 'ok'],
    expect: 'answer-or-error',
    client: 'read',
    summary:
      'half the answer, then a clean end of the (chunked) body inside a frame: an honest error (never a cut answer)',
  },
  {
    name: 'eof-mid-frame-close',
    script: ['eof-mid-frame-close', 'ok'],
    expect: 'answer-or-error',
    client: 'read',
    summary:
      'half the answer, then the connection closes inside a frame of a close-delimited body: an honest error (never a cut answer)',
  },
  {
    name: 'reset-mid-frame',
    script: ['reset-mid-frame', 'ok'],
    expect: 'answer-or-error',
    client: 'read',
    summary:
      'most of the answer, then a connection reset mid-frame: an honest error (never a cut answer)',
  },
  {
    name: 'fatal-error-frame',
    script: ['fatal-error-frame'],
    expect: 'error',
    client: 'read',
    summary: 'an invalid-request error frame on every attempt: an honest error',
  },
  {
    name: 'client-disconnect',
    script: [{ kind: 'slow-drip', delayMs: 200 }],
    expect: 'answer-or-error',
    client: 'disconnect',
    summary:
      'the client leaves after the first token: the gateway should let go of the upstream at once',
  },
  {
    name: 'client-pause',
    script: [{ kind: 'slow-drip', delayMs: 20 }],
    expect: 'answer',
    client: 'pause',
    summary:
      'the client stops reading for a while after the first token: it should still get the whole answer',
  },
]

/** The scenarios a gateway that continues a cut answer (`continueAfterCut`) answers whole. */
const continued: ReadonlySet<string> = new Set(['partial-then-cut', 'eof-mid-frame'])

/**
 * `scenarios` as a gateway with `continueAfterCut` should answer them: a cut after output
 * (then a good attempt that continues the prefilled answer) is answered whole.
 */
export function expectingContinuation(
  scenarios: readonly ChaosScenario[],
): readonly ChaosScenario[] {
  return scenarios.map((scenario) =>
    continued.has(scenario.name)
      ? {
          ...scenario,
          expect: 'answer',
          summary: `${scenario.summary}; with continuation on, the rest is asked for with the received text prefilled: the whole answer`,
        }
      : scenario,
  )
}

/** Faults that load mode mixes in (client-side scenarios and the baseline are not faults). */
export const loadFaults: readonly ChaosScenario[] = chaosScenarios.filter(
  (scenario) => scenario.client === 'read' && scenario.name !== 'ok',
)

/** The scenarios named by `--scenarios` (`all`, or a comma-separated list). */
export function selectScenarios(list: string): readonly ChaosScenario[] {
  if (list.trim() === 'all') return chaosScenarios
  const names = list
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '')
  const unknown = names.filter((name) => !chaosScenarios.some((s) => s.name === name))
  if (unknown.length > 0 || names.length === 0) {
    throw new RangeError(
      `--scenarios: unknown scenario ${unknown.map((name) => `"${name}"`).join(', ') || '(none given)'}; known: all, ${chaosScenarios.map((s) => s.name).join(', ')}`,
    )
  }
  return chaosScenarios.filter((scenario) => names.includes(scenario.name))
}

/** The faults whose stall `--stall-ms` bounds. */
const stalls: readonly string[] = ['keepalives-only', 'role-only-then-stall']

/**
 * The scripts of every scenario, by name, for the upstream: the stalls last `stallMs`, then
 * the body ends cleanly with no output (`Infinity`: endless).
 */
export function upstreamScripts(stallMs: number): Record<string, Scenario> {
  const bounded = (fault: Scenario[number]): Scenario[number] => {
    if (stallMs === Number.POSITIVE_INFINITY) return fault
    const kind = typeof fault === 'string' ? fault : fault.kind
    if (!stalls.includes(kind)) return fault
    return typeof fault === 'string'
      ? { kind: fault as FaultKind, forMs: stallMs }
      : { ...fault, forMs: stallMs }
  }
  return Object.fromEntries(
    chaosScenarios.map((scenario) => [scenario.name, scenario.script.map(bounded)]),
  )
}
