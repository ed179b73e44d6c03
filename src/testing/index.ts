/**
 * `stream-boundary/testing`: fast-check arbitraries for SSE byte streams and their
 * chunkings, a scripted upstream body and a recording downstream sink, so adapter and
 * gateway authors can test the way the library tests itself. `fast-check` is a peer
 * dependency of this entry only; the core never imports it.
 *
 * @module
 */

export * as arbitraries from './arbitraries.js'
export type { CheckAdapterOptions, StreamSample } from './check-adapter.js'
export { AdapterConformanceError, checkAdapter } from './check-adapter.js'
export type {
  ChaosMarker,
  Fault,
  FaultKind,
  FaultyUpstream,
  FaultyUpstreamListenOptions,
  FaultyUpstreamOptions,
  RecordedRequest,
  Scenario,
} from './faulty-upstream.js'
export { chaosMarker, createFaultyUpstream, parseChaosMarker } from './faulty-upstream.js'
export type { RecordingSink, SinkEvent } from './recording-sink.js'
export { createRecordingSink } from './recording-sink.js'
export type { ScriptedBody, ScriptStep } from './scripted-body.js'
export { scriptedBody } from './scripted-body.js'
export type { WireWriter } from './wire.js'
export { wireFor } from './wire.js'
