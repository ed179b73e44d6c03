/**
 * Checks of numeric options, shared by every module so a wrong option fails up front with
 * the same exact message wherever it is given.
 *
 * @module
 */

/** A positive safe integer (a count or a size), or a `RangeError` naming the option. */
export function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a positive integer, got ${String(value)}`)
  }
  return value
}

/** A positive, finite number of milliseconds, or a `RangeError` naming the option. */
export function positiveMilliseconds(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new RangeError(`${name} must be a positive number of milliseconds, got ${String(value)}`)
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
