/**
 * Frame path: the bare read loop (the floor), the frame reader, the whole pump (reader +
 * tracker + commit gate writing to a null sink), and the common alternative
 * `TextDecoderStream → EventSourceParserStream` (with and without `JSON.parse` per event),
 * side by side on the same seeded input.
 */

/** A sink that takes every write synchronously and keeps nothing. */
export function nullSink(): DownstreamSink {
  return { signal: new AbortController().signal, sendHead() {}, write() {}, close() {}, abort() {} }
}

import { EventSourceParserStream } from 'eventsource-parser/stream'
import {
  anthropicMessages,
  createCommitGate,
  createFrameReader,
  type DownstreamSink,
  deliver,
  openaiChat,
  type StreamAdapter,
} from '../src/index.js'
import { anthropicStream, chunkFixed, chunkPerFrame, openaiChatStream, streamOf } from './inputs.js'
import { legacyParseFields } from './legacy-parse-fields.js'
import { type Measurement, measureSideBySide } from './measure.js'

const decoder = new TextDecoder('utf-8', { ignoreBOM: true })

export interface FramePathResult {
  input: string
  chunking: string
  frames: number
  bytes: number
  results: (Measurement & { ratioToFloor: number })[]
}

export async function benchFramePath(options: {
  frames: number
  rounds: number
}): Promise<FramePathResult[]> {
  const inputs: { input: string; bytes: Uint8Array; adapter: StreamAdapter }[] = [
    { input: 'openai-chat', bytes: openaiChatStream(options.frames), adapter: openaiChat },
    { input: 'anthropic', bytes: anthropicStream(options.frames), adapter: anthropicMessages },
  ]
  const out: FramePathResult[] = []
  for (const { input, bytes, adapter } of inputs) {
    const frameCount = chunkPerFrame(bytes).length
    for (const [chunking, chunks] of [
      ['one frame per chunk', chunkPerFrame(bytes)],
      ['16 KiB chunks', chunkFixed(bytes, 16 * 1024)],
    ] as const) {
      const results = await measureSideBySide(
        [
          {
            name: 'bare reader.read() loop (floor)',
            run: async () => {
              const reader = streamOf(chunks).getReader()
              let n = 0
              for (let r = await reader.read(); !r.done; r = await reader.read())
                n += r.value.length > 0 ? 1 : 0
              return chunking === 'one frame per chunk' ? n : frameCount
            },
          },
          {
            name: 'createFrameReader (raw only)',
            run: async () => {
              const reader = createFrameReader(streamOf(chunks))
              let n = 0
              while ((await reader.next()) !== null) n++
              return n
            },
          },
          {
            name: 'createFrameReader + fields (eventsource-parser)',
            run: async () => {
              const reader = createFrameReader(streamOf(chunks))
              let n = 0
              for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
                if (frame.data !== undefined) n++
              }
              return n
            },
          },
          {
            // The same work with the hand-written parser fields used before eventsource-parser
            // parsed them: decode each frame and parse it, on first access as the reader does.
            name: 'createFrameReader + fields (previous hand parser)',
            run: async () => {
              const reader = createFrameReader(streamOf(chunks))
              let n = 0
              for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
                if (legacyParseFields(decoder.decode(frame.raw)).data !== undefined) n++
              }
              return n
            },
          },
          {
            name: 'whole pump: reader + tracker + gate (null sink)',
            run: async () => {
              const gate = createCommitGate(nullSink(), {
                keepAliveIntervalMs: Number.POSITIVE_INFINITY,
              })
              const outcome = await deliver({ gate, body: streamOf(chunks), adapter })
              if (outcome.kind !== 'committed')
                throw new Error('the benchmark stream did not commit')
              return outcome.pump.frames
            },
          },
          {
            name: 'TextDecoderStream + EventSourceParserStream + JSON.parse',
            run: async () => {
              const events = streamOf(chunks)
                .pipeThrough(
                  new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>,
                )
                .pipeThrough(new EventSourceParserStream())
                .getReader()
              let n = 0
              for (let r = await events.read(); !r.done; r = await events.read()) {
                if (r.value.data !== '[DONE]') JSON.parse(r.value.data)
                n++
              }
              return n
            },
          },
          {
            name: 'TextDecoderStream + EventSourceParserStream',
            run: async () => {
              const events = streamOf(chunks)
                .pipeThrough(
                  new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>,
                )
                .pipeThrough(new EventSourceParserStream())
                .getReader()
              let n = 0
              for (let r = await events.read(); !r.done; r = await events.read()) n++
              return n
            },
          },
        ],
        bytes.length,
        options.rounds,
      )
      const floor = results[0]?.usPerFrame ?? Number.NaN
      out.push({
        input,
        chunking,
        frames: frameCount,
        bytes: bytes.length,
        results: results.map((r) => ({ ...r, ratioToFloor: r.usPerFrame / floor })),
      })
    }
  }
  return out
}
