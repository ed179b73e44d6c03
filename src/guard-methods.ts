/**
 * Wrapping an object the host gave the library (an adapter) so that a method that throws, or
 * returns what it must not, fails with one error naming it. No imports: the testing kit
 * carries its own copy (the relay's guard and `checkAdapter` share it).
 *
 * @module
 */

/** What an adapter method must return, when it returns something the library relies on. */
export const adapterReturns: Readonly<Record<string, (value: unknown) => boolean>> = {
  inspect: (value) =>
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { kind?: unknown }).kind === 'string',
  renderError: (value) => value instanceof Uint8Array,
  renderStop: (value) => value instanceof Uint8Array,
  renderReasoningAsText: (value) => value instanceof Uint8Array,
  renderErrorBody: (value) => typeof value === 'string',
}

/** Every method name of `value`, its prototypes' included. */
function methodNames(value: object): string[] {
  const names = new Set<string>()
  for (
    let target: object | null = value;
    target !== null && target !== Object.prototype;
    target = Object.getPrototypeOf(target)
  ) {
    for (const name of Object.getOwnPropertyNames(target)) {
      if (name !== 'constructor' && typeof (value as Record<string, unknown>)[name] === 'function')
        names.add(name)
    }
  }
  return [...names]
}

/**
 * A frozen copy of `target` whose every method calls the original and turns a throw, or a
 * return that `returns[name]` refuses, into `fail('<prefix>.<name>', cause, what)`.
 */
export function guardMethods<T extends object>(
  target: T,
  prefix: string,
  fail: (component: string, cause: unknown, what: string) => Error,
  returns: Readonly<Record<string, (value: unknown) => boolean>> = {},
): T {
  const out = { ...target } as Record<string, unknown>
  for (const name of methodNames(target)) {
    const method = (target as Record<string, (...args: unknown[]) => unknown>)[name] as (
      ...args: unknown[]
    ) => unknown
    const check = returns[name]
    const component = `${prefix}.${name}`
    out[name] = (...args: unknown[]) => {
      let value: unknown
      try {
        value = method.apply(target, args)
      } catch (error) {
        throw fail(component, error, 'threw')
      }
      if (check !== undefined && !check(value)) {
        throw fail(component, value, 'returned something that is not what it must')
      }
      return value
    }
  }
  return Object.freeze(out) as T
}
