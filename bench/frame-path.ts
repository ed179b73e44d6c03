/**
 * Frame path: the bare read loop (the floor), the frame reader, and the common alternative
 * `TextDecoderStream → EventSourceParserStream`, side by side on the same seeded input.
 */

import { EventSourceParserStream } from 'eventsource-parser/stream'
import { createFrameReader } from '../src/index.js'
import { anthropicStream, chunkFixed, chunkPerFrame, openaiChatStream } from './inputs.js'
import { type Measurement, measureSideBySide } from './measure.js'

function streamOf(chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  let index = 0
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        const chunk = chunks[index++]
        if (chunk === undefined) controller.close()
        else controller.enqueue(chunk)
      },
    },
    { highWaterMark: 0 },
  )
}

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
  const inputs = [
    { input: 'openai-chat', bytes: openaiChatStream(options.frames) },
    { input: 'anthropic', bytes: anthropicStream(options.frames) },
  ]
  const out: FramePathResult[] = []
  for (const { input, bytes } of inputs) {
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
            name: 'createFrameReader + fields',
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
