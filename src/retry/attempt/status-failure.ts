/**
 * An upstream's answer with a status that is no success: its verdict (the library's rule,
 * the policy's `retryOn` over it, a caller's own refused credential never retried) and the
 * error passed on as the upstream stated it.
 *
 * @module
 */

import { redactSecrets } from '../../protocols/sanitize.js'
import { classifyAttemptFailure } from '../decisions/classify.js'
import { errorFromBody } from '../decisions/error-body.js'
import type { AttemptInput } from '../shared/attempt-io.js'
import type { UpstreamHttpError } from '../shared/attempt-types.js'
import type { AttemptFailure, FailureVerdict } from '../shared/verdict.js'

/** The verdict of a non-2xx answer whose body (bounded) is `text`, and what is passed on of it. */
export function statusFailure(
  input: AttemptInput,
  status: number,
  headers: Headers,
  text: string,
): { verdict: FailureVerdict; upstream: UpstreamHttpError | undefined } {
  const failure: AttemptFailure = {
    kind: 'status',
    status,
    headers,
    error: errorFromBody(text, status),
  }
  let verdict = retryOverride(classifyAttemptFailure(failure), status, headers, input)
  // The caller's own credential was refused: another try with it would be refused too.
  if (input.lease === undefined && verdict.key.kind === 'auth-failed') {
    verdict = { ...verdict, retryable: false, status }
  }
  // Only an error the upstream stated is passed on as it was; a redirect never is.
  const upstream = status >= 400 ? { status, headers, body: redactSecrets(text) } : undefined
  return { verdict, upstream }
}

/** Applies the policy's `retryOn` to an upstream HTTP failure. */
function retryOverride(
  verdict: FailureVerdict,
  status: number,
  headers: Headers,
  input: AttemptInput,
): FailureVerdict {
  const retryOn = input.policy.retryOn
  if (retryOn === undefined || verdict.key.kind === 'auth-failed') return verdict
  let retry: boolean | undefined
  try {
    retry =
      typeof retryOn === 'function'
        ? retryOn(Object.freeze({ status, headers }))
        : retryOn.includes(status)
  } catch {
    // A throwing predicate keeps the library's rule: it must not break the request.
    retry = undefined
  }
  return retry === undefined || retry === verdict.retryable
    ? verdict
    : { ...verdict, retryable: retry }
}
