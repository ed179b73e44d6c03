/**
 * The downstream side: the commit gate, the Web sink, and the post-commit pump.
 *
 * @module
 */

export type { DeliverOptions, DeliverOutcome } from './deliver.js'
export { deliver } from './deliver.js'
export { failBeforeContent } from './endings.js'
export type { CommitGate, CommitGateOptions, DownstreamSink, GateState } from './gate.js'
export { createCommitGate } from './gate.js'
export type { ForwardHeadersPolicy } from './headers.js'
export { pump } from './pump.js'
export type {
  DownstreamOptions,
  DownstreamTransform,
  DownstreamTransformContext,
  PumpEnd,
  PumpErrorCause,
  PumpOptions,
  PumpOutcome,
  PumpPolicy,
  StallStats,
} from './pump-policy.js'
export type {
  FrameTranslator,
  ResponseTranslator,
  StreamTranslator,
  TranslatorContext,
} from './translator.js'
export type { WebSink, WebSinkOptions } from './web-sink.js'
export { webSink } from './web-sink.js'
