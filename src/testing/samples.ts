/**
 * What the conformance harness runs on: a stream sample, and the parameters every property is
 * run with. Below both `check-adapter.ts` (the public entry) and `conformance.ts` (the
 * properties), so neither imports the other's types.
 *
 * @module
 */

/**
 * A stream for the harness: bytes, optionally with the EOF class it must end as.
 *
 * @group Conformance
 */
export type StreamSample =
  | Uint8Array
  | {
      readonly bytes: Uint8Array
      readonly eof?: 'completed' | 'partial' | 'thinking-only' | 'error-only' | 'empty'
    }

/** What fast-check is run with, for every property. */
export interface RunParameters {
  readonly numRuns: number
  readonly seed?: number
  readonly path?: string
  readonly endOnFailure: boolean
}
