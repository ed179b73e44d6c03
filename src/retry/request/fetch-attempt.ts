/**
 * `fetchAttempt`, the ready attempt over `fetch` (see `ready-attempt.ts` for the request it
 * builds, shared with `nodeHttpAttempt`). A failure before the request is sent is thrown as
 * a `RequestNotSentError`, which the relay never holds against a key.
 *
 * @module
 */

import { RequestNotSentError } from '../../errors.js'
import {
  attemptRequest,
  checkReadyAttemptOptions,
  type NotSentError,
  type ReadyAttempt,
  type ReadyAttemptOptions,
} from './ready-attempt.js'

/** The ready attempts' failures before sending, as the named error the relay knows. */
const requestNotSent: NotSentError = (step, message, cause) =>
  new RequestNotSentError(step, message, { cause })

/**
 * The ready attempt over `fetch`: sends exactly this attempt's request (`context.request`),
 * so fallbacks, `adjustRequest`, the context-window fit and continuation prefills always go
 * out; the adapter's credential header for the leased key (`options.credential` without a
 * pool); the protocol's required headers (Anthropic's `anthropic-version`); the allowlisted
 * client headers; the attempt's signal; and `redirect: 'manual'`, so a key never follows a
 * redirect. Needs `relay({ request: { url, body } })`. On Node, `nodeHttpAttempt` from
 * `stream-boundary/node` does the same over `node:http` for less CPU per request.
 *
 * @example
 * await relay({ sink, pool, adapter: openaiChat, request: { url, body }, attempt: fetchAttempt() })
 *
 * @group Relay
 */
export function fetchAttempt(
  options: ReadyAttemptOptions & {
    /**
     * The `fetch` to send with.
     * @default globalThis.fetch
     */
    readonly fetch?: (input: string, init: RequestInit) => Promise<Response>
  } = {},
): ReadyAttempt {
  checkReadyAttemptOptions('fetchAttempt', options)
  const send = options.fetch
  if (send !== undefined && typeof send !== 'function')
    throw new TypeError('fetchAttempt: fetch must be a function')
  return async (context) => {
    const { url, headers, body } = attemptRequest(context, options, requestNotSent)
    const init: RequestInit = {
      method: 'POST',
      headers,
      body,
      signal: context.signal,
      redirect: 'manual',
    }
    return send === undefined ? fetch(url, init) : send(url, init)
  }
}
