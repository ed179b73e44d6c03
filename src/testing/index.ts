/**
 * `stream-boundary/testing`: fast-check arbitraries for SSE byte streams and their
 * chunkings, so adapter authors can property-test the way the library tests itself.
 * `fast-check` is a peer dependency of this entry only; the core never imports it.
 *
 * @module
 */

export * as arbitraries from './arbitraries.js'
