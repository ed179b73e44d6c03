/**
 * `stream-boundary/advanced`: the pieces most users never import, kept off the root so the
 * root reads as the library's job. Every options object's defaults (to show, log or build
 * on), the helpers that sanitise and redact upstream text, and the pure decisions the relay
 * makes (how an attempt failed, what a connection error means, a `Retry-After`, a context
 * overflow), for hosts that build their own loop on the root's pieces.
 *
 * Everything here is stateless data or a pure function: using it beside the root entry
 * shares no state and cannot disagree with it.
 *
 * @module stream-boundary/advanced
 */

// Three groups, listed by module: each options object's defaults (`…Defaults`), the
// redaction helpers (`protocols/sanitize.ts`) and the relay's pure decisions and parsers.
export { streamTrackerDefaults } from './classify/index.js'
export { commitGateDefaults } from './commit/gate-options.js'
export { forwardableHeaders, forwardHeadersDefaults } from './commit/headers.js'
export { pumpDefaults } from './commit/pump-policy.js'
export { memoryKeyPoolDefaults } from './key-pool/memory.js'
export { peekDefaults } from './peek/index.js'
export { isRetryableErrorType } from './protocols/common.js'
export {
  maxMessageLength,
  redactSecrets,
  redactValues,
  sanitizeMessage,
} from './protocols/sanitize.js'
export { continueAfterCutDefaults } from './retry/continuation/continuation-policy.js'
export { classifyAttemptFailure } from './retry/decisions/classify.js'
export { classifyConnectionError } from './retry/decisions/connection-errors.js'
export { contextWindowFitDefaults, parseContextOverflow } from './retry/decisions/context-window.js'
export { parseRetryAfter } from './retry/decisions/rate-limit-headers.js'
export { relayDefaults } from './retry/relay/policy.js'
export { resilientFetchDefaults } from './retry/relay/resilient-fetch.js'
export { checkClientBody, clientErrorBody } from './retry/request/client-request.js'
export { readyAttemptDefaults } from './retry/request/ready-attempt.js'
export { requestBodyDefaults } from './retry/request/request-body.js'
export { hedgingDefaults } from './retry/route/hedge.js'
export { frameReaderDefaults } from './sse/reader.js'
