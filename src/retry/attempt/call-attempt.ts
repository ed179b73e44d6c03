/**
 * The one way the route's attempt function (user code) is called, by an attempt and by a
 * continuation alike: the context it is given, with the leased key and the route's adapter,
 * and a thrown error that carries the upstream's response read as that response.
 *
 * @module
 */

import type { KeyLease } from '../../key-pool/types.js'
import type { SignalLike } from '../../stop.js'
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
 * throw that carries the upstream's response (a `Response`, `status`, `statusCode`, `response.status`…) resolves to
 * it, so it is judged by its status like a returned one. The call is raced against `stop`
 * (the attempt's own stop, which its `signal` follows). Not an `async` function: one promise
 * for the race, no more (each promise costs a host running async hooks).
 */
export function callAttemptFunction(
  route: Route,
  context: Omit<AttemptContextBase, 'adapter'> & { readonly key: LeasedKey | undefined },
  stop: SignalLike = context.signal,
): Promise<unknown> {
  let pending: Promise<unknown>
  try {
    const answer = (route.attempt as (context: unknown) => unknown)({
      ...context,
      adapter: route.adapter,
    })
    // A native promise is raced as it is; a value or another thenable is made one.
    pending = answer instanceof Promise ? answer : Promise.resolve(answer)
  } catch (error) {
    return stop.aborted ? Promise.reject(stop.reason) : thrownAnswer(error)
  }
  return untilStopped(pending, stop)
}

/**
 * What a throw of the attempt function (or a rejection of its promise) answers: the upstream's
 * response it carries, or the throw itself. Stopped by the request's clocks or the client,
 * the caller reads why from the signal.
 */
function thrownAnswer(error: unknown): Promise<unknown> {
  // An HTTP helper that throws on a 4xx/5xx: its response is the upstream's answer.
  const response = responseOfThrown(error)
  return response === undefined ? Promise.reject(error) : Promise.resolve(response)
}

/**
 * The attempt function's answer, raced against the attempt's signal (invariant 29): the
 * signal aborts on the request's clocks (deadline, first byte, first output) and on the client
 * leaving, so an attempt function that ignores it and never settles cannot hold the request.
 * It then rejects with the signal's reason; whatever the attempt function answers later has
 * its body released.
 */
function untilStopped(pending: Promise<unknown>, signal: SignalLike): Promise<unknown> {
  if (signal.aborted) {
    releaseLate(pending)
    return Promise.reject(signal.reason)
  }
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      releaseLate(pending)
      reject(signal.reason)
    }
    signal.addEventListener('abort', onAbort)
    pending.then(
      (value) => {
        signal.removeEventListener('abort', onAbort)
        resolve(value)
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort)
        if (signal.aborted) {
          reject(error)
          return
        }
        const response = responseOfThrown(error)
        if (response === undefined) reject(error)
        else resolve(response)
      },
    )
  })
}

/** Releases the body of an answer that came after its attempt was stopped; a late throw is dropped. */
function releaseLate(pending: Promise<unknown>): void {
  pending.then(
    (late) => {
      try {
        const body = (late as { body?: ReadableStream | null } | null)?.body
        void body?.cancel().catch(() => {})
      } catch {
        // Not a response: nothing to release.
      }
    },
    () => {},
  )
}
