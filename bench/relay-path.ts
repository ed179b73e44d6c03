/**
 * Relay path: `relay()` + `webSink()` relaying an upstream `Response` to a client that reads
 * the body, against a raw web-stream relay (read a chunk, enqueue it into the response body)
 * and against the usual parse-everything relay (`TextDecoderStream` → `EventSourceParserStream`
 * → `JSON.parse` → re-encode), side by side on the same seeded input.
 */

import { EventSourceParserStream } from 'eventsource-parser/stream'
import { createMemoryKeyPool, openaiChat, relay, webSink } from '../src/index.js'
import { chunkPerFrame, openaiChatStream, streamOf } from './inputs.js'
import { type Measurement, measureSideBySide } from './measure.js'

/** Reads a response body to its end, as a client would; returns the frames (blank lines) seen. */
async function drain(body: ReadableStream<Uint8Array>): Promise<number> {
  const reader = body.getReader()
  let frames = 0
  for (let r = await reader.read(); !r.done; r = await reader.read()) {
    const chunk = r.value
    // Frames end in "\n\n"; the inputs hold no other blank line.
    for (let at = chunk.indexOf(10); at !== -1; at = chunk.indexOf(10, at + 1)) {
      if (chunk[at + 1] === 10) frames++
    }
  }
  return frames
}

/** The floor: read each upstream chunk and enqueue it into the body the client reads. */
function rawRelay(chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  const upstream = streamOf(chunks).getReader()
  let waiting: (() => void) | undefined
  let controller!: ReadableStreamDefaultController<Uint8Array>
  const body = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c
      },
      pull() {
        waiting?.()
        waiting = undefined
      },
    },
    new ByteLengthQueuingStrategy({ highWaterMark: 65_536 }),
  )
  void (async () => {
    for (let r = await upstream.read(); !r.done; r = await upstream.read()) {
      controller.enqueue(r.value)
      if ((controller.desiredSize ?? 1) <= 0) await new Promise<void>((go) => (waiting = go))
    }
    controller.close()
  })()
  return body
}

const textEncoder = new TextEncoder()

/** Decode, parse every event, `JSON.parse` its data and write it back out. */
function parsingRelay(chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  return streamOf(chunks)
    .pipeThrough(new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>)
    .pipeThrough(new EventSourceParserStream())
    .pipeThrough(
      new TransformStream({
        transform(event, controller) {
          const data = event.data === '[DONE]' ? event.data : JSON.stringify(JSON.parse(event.data))
          controller.enqueue(textEncoder.encode(`data: ${data}\n\n`))
        },
      }),
    )
}

export interface RelayPathResult {
  readonly frames: number
  readonly bytes: number
  readonly results: (Measurement & { ratioToRaw: number })[]
  /** stream-boundary's relay per frame against the raw relay's. */
  readonly relayToRaw: number
  /** How many times cheaper per frame stream-boundary's relay is than the parsing relay. */
  readonly parsingToRelay: number
  /** The same two ratios from each contender's fastest round (steadier on a shared machine). */
  readonly relayToRawBest: number
  readonly parsingToRelayBest: number
}

export async function benchRelayPath(options: {
  frames: number
  rounds: number
}): Promise<RelayPathResult> {
  const bytes = openaiChatStream(options.frames)
  const chunks = chunkPerFrame(bytes)
  const pool = createMemoryKeyPool([{ id: 'bench', secret: 'sk-bench' }])
  const results = await measureSideBySide(
    [
      { name: 'raw web-stream relay (floor)', run: () => drain(rawRelay(chunks)) },
      {
        name: 'stream-boundary relay() + webSink',
        run: async () => {
          const { sink, response } = webSink()
          const relayed = relay({
            sink,
            pool,
            adapter: openaiChat,
            policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
            attempt: async () =>
              new Response(streamOf(chunks), {
                headers: { 'content-type': 'text/event-stream' },
              }),
          })
          const frames = await drain((await response).body as ReadableStream<Uint8Array>)
          const outcome = await relayed
          if (outcome.kind !== 'committed' || outcome.end.kind !== 'completed')
            throw new Error(`the relay ended ${outcome.kind}`)
          return frames
        },
      },
      {
        name: 'TextDecoderStream + EventSourceParserStream + JSON.parse + re-encode',
        run: () => drain(parsingRelay(chunks)),
      },
    ],
    bytes.length,
    options.rounds,
  )
  const [raw, ours, parsing] = results as [Measurement, Measurement, Measurement]
  return {
    frames: chunks.length,
    bytes: bytes.length,
    results: results.map((r) => ({ ...r, ratioToRaw: r.usPerFrame / raw.usPerFrame })),
    relayToRaw: ours.usPerFrame / raw.usPerFrame,
    parsingToRelay: parsing.usPerFrame / ours.usPerFrame,
    relayToRawBest: ours.bestUsPerFrame / raw.bestUsPerFrame,
    parsingToRelayBest: parsing.bestUsPerFrame / ours.bestUsPerFrame,
  }
}
