/**
 * The one way the route's attempt function (user code) is called, by an attempt and by a
 * continuation alike: the context it is given, with the leased key and the route's adapter,
 * and a thrown error that carries the upstream's response read as that response.
 *
 * @module
 */

import type { KeyLease } from '../../key-pool/types.js'
import { responseOfThrown } from '../decisions/thrown-response.js'
import type { AttemptContextBase, LeasedKey, Route } from '../shared/attempt-types.js'

/** The key an attempt function is given for a lease (none when the caller owns credentials). */
export function leasedKeyOf(lease: KeyLease | undefined): LeasedKey | undefined {
  return lease === undefined
    ? undefined
    : { id: lease.keyId, secret: lease.secret, metadata: lease.metadata }
}

/**
 * Calls the route's attempt function, whose answer is checked by the caller (user code). A
 * throw that carries the upstream's response (`error.response`, or `error.status`) resolves to
 * it, so it is judged by its status like a returned one.
 */
export async function callAttemptFunction(
  route: Route,
  context: Omit<AttemptContextBase, 'adapter'> & { readonly key: LeasedKey | undefined },
): Promise<unknown> {
  try {
    return await (route.attempt as (context: unknown) => Promise<unknown>)({
      ...context,
      adapter: route.adapter,
    })
  } catch (error) {
    // An HTTP helper that throws on a 4xx/5xx: its response is the upstream's answer.
    const response = responseOfThrown(error)
    if (response === undefined) throw error
    return response
  }
}
