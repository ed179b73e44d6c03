/**
 * Checks of numeric options, shared by every module so a wrong option fails up front with
 * the same exact message wherever it is given.
 *
 * @module
 */

/**
 * How many times an options normaliser (a function that checks an options object and fills in
 * its defaults) ran in this process, by name. Each normaliser counts itself here, so a test can
 * hold the relay to guarantee 30 ("checked once"): a relay built with `createRelay` or
 * `createResilientFetch` normalises nothing per request or per attempt. Not exported from
 * the package.
 *
 * @internal read by the tests of guarantee 30
 */
export const normalizations: Record<string, number> = {}

/** Counts one run of the normaliser `name` (see {@link normalizations}). */
export function countNormalization(name: string): void {
  normalizations[name] = (normalizations[name] ?? 0) + 1
}

/** A positive safe integer (a count or a size), or a `RangeError` naming the option. */
export function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a positive integer, got ${String(value)}`)
  }
  return value
}

/** `value` when it is a boolean; a `TypeError` naming the option otherwise. */
export function boolean(name: string, value: boolean): boolean {
  if (typeof value !== 'boolean') {
    throw new TypeError(`${name} must be a boolean, got ${typeof value}`)
  }
  return value
}

/** A positive number (`Infinity` only when allowed), or a `RangeError` naming the option. */
export function positiveNumber(name: string, value: number, allowInfinity = false): number {
  if (!(value > 0) || (!allowInfinity && !Number.isFinite(value))) {
    throw new RangeError(`${name} must be a positive number, got ${String(value)}`)
  }
  return value
}

/**
 * The longest delay `setTimeout` honours; a longer one fires at once, so a timeout past it
 * would cut a stream immediately instead of never.
 */
export const maxTimerDelayMs = 2_147_483_647

/**
 * A duration in milliseconds: finite, above 0 (or at least 0 with `zero`), and at most
 * {@link maxTimerDelayMs}; else a `RangeError` naming the option. Every duration option is
 * checked by it or by {@link timeoutMilliseconds}: a value past `setTimeout`'s limit would
 * fire at once, so it is refused rather than taken as "now".
 */
function milliseconds(name: string, value: number, zero: boolean): number {
  if (
    typeof value !== 'number' ||
    !(zero ? value >= 0 : value > 0) ||
    !(value <= maxTimerDelayMs)
  ) {
    const least = zero ? '0 or more' : 'a positive number of'
    throw new RangeError(
      `${name} must be ${least} milliseconds up to ${maxTimerDelayMs}, got ${String(value)}`,
    )
  }
  return value
}

/** A positive number of milliseconds up to {@link maxTimerDelayMs}, or a `RangeError`. */
export function positiveMilliseconds(name: string, value: number): number {
  return milliseconds(name, value, false)
}

/** 0 or more milliseconds up to {@link maxTimerDelayMs}, or a `RangeError`. */
export function nonNegativeMilliseconds(name: string, value: number): number {
  return milliseconds(name, value, true)
}

/**
 * A timeout in milliseconds: positive and at most {@link maxTimerDelayMs}, or `Infinity`
 * meaning "off" (the caller then creates no timer). `0`, negatives and `NaN` get a
 * `RangeError` naming the option, since each of them reads as "off" in some library and as
 * "fire now" in another.
 */
export function timeoutMilliseconds(name: string, value: number): number {
  if (value === Number.POSITIVE_INFINITY) return value
  if (typeof value !== 'number' || !(value > 0) || value > maxTimerDelayMs) {
    throw new RangeError(
      `${name} must be a positive number of milliseconds up to ${maxTimerDelayMs}, or Infinity to turn it off; got ${String(value)}`,
    )
  }
  return value
}

/** Edit distance between two short names, case-insensitive (for "did you mean"). */
function distance(a: string, b: string): number {
  const x = a.toLowerCase()
  const y = b.toLowerCase()
  let previous = Array.from({ length: y.length + 1 }, (_, i) => i)
  for (let i = 1; i <= x.length; i++) {
    const current = [i]
    for (let j = 1; j <= y.length; j++) {
      const cost = x[i - 1] === y[j - 1] ? 0 : 1
      current[j] = Math.min(
        (previous[j] as number) + 1,
        (current[j - 1] as number) + 1,
        (previous[j - 1] as number) + cost,
      )
    }
    previous = current
  }
  return previous[y.length] as number
}

/**
 * `; did you mean "x"?` for the known name closest to `name` (a typo, a wrong case: at most
 * 2 edits, case-insensitive), or `''` when none is close.
 */
export function didYouMean(name: string, known: readonly string[]): string {
  const close = nearest(name, known)
  return close === undefined ? '' : `; did you mean "${close}"?`
}

/** The known name closest to `name`, when one is close (a typo, a wrong case). */
function nearest(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined
  let bestDistance = 3
  for (const candidate of known) {
    const d = distance(name, candidate)
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  return best
}

/**
 * Throws a `TypeError` for a key of `options` that is not one of `known` (a misspelled
 * option would otherwise be ignored in silence), naming it and the nearest valid name:
 * `relay: unknown option "maxAtempts"; did you mean "maxAttempts"?`. `undefined` options
 * pass; a value that is not an object is left to the caller's own check.
 */
export function rejectUnknownKeys(where: string, options: unknown, known: readonly string[]): void {
  if (typeof options !== 'object' || options === null) return
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue
    throw new TypeError(`${where}: unknown option "${key}"${didYouMean(key, known)}`)
  }
}
