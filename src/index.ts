/**
 * stream-boundary: make LLM streaming reliable. Retry inside the window before the first
 * byte a client can see, commit once, and end honestly in the client's own protocol.
 * This entry is runtime-agnostic (Web standards only).
 *
 * @module
 */

export * from './classify/index.js'
export * from './commit/index.js'
export * from './errors.js'
export * from './key-pool/index.js'
export * from './peek/index.js'
export * from './protocols/index.js'
export * from './retry/index.js'
export * from './sse/index.js'
