/**
 * The faults the faulty upstream can play, their knobs, and the check of a scenario.
 *
 * @module
 */

import { didYouMean, rejectUnknownKeys } from '../options.js'

/**
 * Every fault the upstream can play.
 *
 * @group Fault injection
 */
export type FaultKind =
  | 'ok'
  | 'empty'
  | 'hang-before-headers'
  | 'headers-then-hang'
  | 'keepalives-only'
  | 'role-only-then-stall'
  | 'error-frame'
  | 'fatal-error-frame'
  | 'rate-limited'
  | 'overloaded'
  | 'html-500'
  | 'json-error-200'
  | 'html-200'
  | 'partial-then-cut'
  | 'thinking-only'
  | 'slow-drip'
  | 'reset-mid-frame'
  | 'oversized-frame'
  | 'invalid-utf8'
  | 'no-final-blank-line'
  | 'eof-mid-frame'
  | 'eof-mid-frame-close'
  | 'streaming-unsupported'
  | 'context-overflow'

/** Every fault kind: a table the compiler keeps complete. */
const faultKinds = Object.keys({
  ok: true,
  empty: true,
  'hang-before-headers': true,
  'headers-then-hang': true,
  'keepalives-only': true,
  'role-only-then-stall': true,
  'error-frame': true,
  'fatal-error-frame': true,
  'rate-limited': true,
  overloaded: true,
  'html-500': true,
  'json-error-200': true,
  'html-200': true,
  'partial-then-cut': true,
  'thinking-only': true,
  'slow-drip': true,
  'reset-mid-frame': true,
  'oversized-frame': true,
  'invalid-utf8': true,
  'no-final-blank-line': true,
  'eof-mid-frame': true,
  'eof-mid-frame-close': true,
  'streaming-unsupported': true,
  'context-overflow': true,
} satisfies Record<FaultKind, true>)

/**
 * One fault, with its knobs.
 *
 * @group Fault injection
 */
export interface Fault {
  readonly kind: FaultKind
  /** `rate-limited`: the `retry-after` header, in seconds. @default 1 */
  readonly retryAfterSeconds?: number
  /** `rate-limited`: a `retry-after-ms` header instead. */
  readonly retryAfterMs?: number
  /** `slow-drip`: the gap between frames. @default 300 */
  readonly delayMs?: number
  /** `context-overflow`: the model's window, in tokens. @default 200_000 */
  readonly limitTokens?: number
  /** `context-overflow`: the request's input, in tokens. @default 190_000 */
  readonly inputTokens?: number
  /**
   * `keepalives-only`, `role-only-then-stall`: how long the stall lasts before a clean end of
   * the body (no output came, so the stream was empty). @default endless (keep-alives for
   * 10,000 intervals; the role-only preamble's silence until the connection closes)
   */
  readonly forMs?: number
}

/**
 * Faults per attempt; the last one repeats. `'empty-eof'` is the old name of `'empty'`, still
 * accepted (and recorded as `'empty'`) so scripts written against it keep running.
 *
 * @group Fault injection
 */
export type Scenario = readonly (Fault | FaultKind | 'empty-eof')[]

/** Every knob of a {@link Fault}: a table the compiler keeps complete. */
const faultKeys = Object.keys({
  kind: true,
  retryAfterSeconds: true,
  retryAfterMs: true,
  delayMs: true,
  limitTokens: true,
  inputTokens: true,
  forMs: true,
} satisfies Record<keyof Fault, true>)

/** A scenario's faults are known kinds with known knobs: a typo is a `TypeError` naming it. */
export function checkScenarios(scenarios: Readonly<Record<string, Scenario>>): void {
  for (const [name, scenario] of Object.entries(scenarios)) {
    if (!Array.isArray(scenario)) {
      throw new TypeError(`createFaultyUpstream: scenarios.${name} must be a list of faults`)
    }
    for (const [index, fault] of scenario.entries()) {
      const where = `createFaultyUpstream: scenarios.${name}[${index}]`
      if (typeof fault === 'object' && fault !== null) rejectUnknownKeys(where, fault, faultKeys)
      const kind = typeof fault === 'string' ? fault : (fault as Fault | null)?.kind
      if (kind === 'empty-eof' || faultKinds.includes(kind as string)) continue
      throw new TypeError(
        `${where}: unknown fault ${JSON.stringify(kind)}${didYouMean(String(kind), faultKinds)}`,
      )
    }
  }
}
