/**
 * The `arbitraries` namespace of `stream-boundary/testing`: fast-check generators of SSE byte
 * streams and their chunkings (`streams.ts`), complete protocol streams per scenario, and odd
 * frame data and mangled streams (`mangle.ts`). Only names: the generators live in those two.
 *
 * @module
 */

export type { MangledStreamOptions } from './mangle.js'
export {
  dataFrameText,
  frameData,
  frameDataCorpus,
  mangledStream,
  wrongShapeMessage,
  wrongShapeObject,
} from './mangle.js'
export type {
  LineEnding,
  ProtocolScenario,
  ProtocolStream,
  SseStreamOptions,
} from './streams.js'
export {
  chunkedSseStream,
  chunkings,
  concatBytes,
  lineEnding,
  lineText,
  protocolScenarios,
  protocolStream,
  splitAt,
  sseFrame,
  sseStream,
} from './streams.js'
