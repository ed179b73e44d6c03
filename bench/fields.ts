/**
 * Field parsing alone, per frame: what a frame's first `event`/`data` access costs with
 * eventsource-parser (the reader's path) and with the hand-written parser it replaced, both
 * including the UTF-8 decode, interleaved on the same frames so machine noise hits both.
 */

import { Frame } from '../src/sse/frame.js'
import { createFrameReader } from '../src/sse/reader.js'
import { anthropicStream, openaiChatStream } from './inputs.js'
import { legacyParseFields } from './legacy-parse-fields.js'
import { type Measurement, measureSideBySide } from './measure.js'

export interface FieldsResult {
  input: string
  frames: number
  results: Measurement[]
}

async function rawFrames(bytes: Uint8Array): Promise<Uint8Array[]> {
  const reader = createFrameReader(
    (async function* () {
      yield bytes
    })(),
  )
  const out: Uint8Array[] = []
  for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
    out.push(frame.raw)
  }
  return out
}

export async function benchFields(options: {
  frames: number
  rounds: number
}): Promise<FieldsResult[]> {
  const decoder = new TextDecoder('utf-8', { ignoreBOM: true })
  const out: FieldsResult[] = []
  for (const [input, bytes] of [
    ['openai-chat', openaiChatStream(options.frames)],
    ['anthropic', anthropicStream(options.frames)],
  ] as const) {
    const frames = await rawFrames(bytes)
    const results = await measureSideBySide(
      [
        {
          name: 'eventsource-parser (Frame fields)',
          run: async () => {
            let n = 0
            for (const raw of frames) if (new Frame(raw, true, 0).data !== undefined) n++
            return n
          },
        },
        {
          name: 'previous hand parser',
          run: async () => {
            let n = 0
            for (const raw of frames)
              if (legacyParseFields(decoder.decode(raw)).data !== undefined) n++
            return n
          },
        },
        {
          name: 'decode only (floor)',
          run: async () => {
            let n = 0
            for (const raw of frames) if (decoder.decode(raw).length > 0) n++
            return n
          },
        },
      ],
      bytes.length,
      options.rounds,
    )
    out.push({ input, frames: frames.length, results })
  }
  return out
}
