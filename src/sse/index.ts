/**
 * SSE frame reading: whole frames with their exact bytes.
 *
 * @module
 */

export type { SseFields, SseFrame } from './frame.js'
export type { FrameReader, FrameReaderOptions, FrameSource, NextFrameOptions } from './reader.js'
export { createFrameReader } from './reader.js'
