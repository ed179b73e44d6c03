/**
 * `stream-boundary/testing`: what the library's own tests use, so adapter and gateway authors
 * can test the way the library tests itself.
 *
 * `checkAdapter` runs the conformance properties against your own `StreamAdapter`;
 * `arbitraries` generates SSE byte streams and their chunkings (fast-check);
 * `createFaultyUpstream` is a scriptable upstream that fails the way real ones do; a scripted
 * upstream body and a recording downstream sink are for unit tests; `createSimulatedFleet`
 * answers for several keys with rate limits of their own, to measure a key pool against. `fast-check` is a peer
 * dependency of this entry only; the core never imports it.
 *
 * @module stream-boundary/testing
 */

export * as arbitraries from './arbitraries.js'
export type { ChaosMarker } from './chaos-marker.js'
export { chaosMarker, parseChaosMarker } from './chaos-marker.js'
export type { CheckAdapterOptions } from './check-adapter.js'
export { AdapterConformanceError, checkAdapter } from './check-adapter.js'
export type { Fault, FaultKind, Scenario } from './faults.js'
export type {
  FaultyUpstream,
  FaultyUpstreamListenOptions,
  FaultyUpstreamOptions,
  RecordedRequest,
} from './faulty-upstream.js'
export { createFaultyUpstream } from './faulty-upstream.js'
export type {
  FleetHeaderMode,
  FleetKey,
  FleetKeyStats,
  SimulatedFleet,
  SimulatedFleetOptions,
} from './fleet.js'
export { createSimulatedFleet } from './fleet.js'
export type { RecordingSink, SinkEvent } from './recording-sink.js'
export { createRecordingSink } from './recording-sink.js'
export type { StreamSample } from './samples.js'
export type { ScriptedBody, ScriptStep } from './scripted-body.js'
export { scriptedBody } from './scripted-body.js'
export { wireFor } from './wire.js'
export type { WireWriter } from './wire-format.js'
