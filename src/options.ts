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
