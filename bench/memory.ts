/**
 * Memory: heap per in-flight stream with many concurrent idle streams held open through
 * the pump (against the same upstreams merely being read, the floor), and a soak of many
 * frames through one stream with the heap sampled along the way. Needs `--expose-gc`.
 */

import { createCommitGate, deliver, openaiChat } from '../src/index.js'
import { nullSink } from './frame-path.js'

const encoder = new TextEncoder()
const role = encoder.encode(
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
)
const text = encoder.encode(
  'data: {"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}\n\n',
)

function gc(): void {
  const collect = (globalThis as { gc?: () => void }).gc
  if (collect === undefined) throw new Error('run with --expose-gc')
  collect()
  collect()
}

/** An upstream that sends its preamble and one output frame, then stays open. */
function idleUpstream(): { stream: ReadableStream<Uint8Array>; close(): void } {
  let controller!: ReadableStreamDefaultController<Uint8Array>
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c
      c.enqueue(role)
      c.enqueue(text)
    },
  })
  return { stream, close: () => controller.close() }
}

async function heapPerStream(
  count: number,
  hold: (stream: ReadableStream<Uint8Array>) => Promise<unknown>,
): Promise<number> {
  gc()
  const before = process.memoryUsage().heapUsed
  const upstreams = Array.from({ length: count }, () => idleUpstream())
  const running = upstreams.map((upstream) => hold(upstream.stream))
  await new Promise((resolve) => setTimeout(resolve, 50))
  gc()
  const after = process.memoryUsage().heapUsed
  for (const upstream of upstreams) upstream.close()
  await Promise.all(running)
  return (after - before) / count
}

export interface MemoryResult {
  readonly streams: number
  /** Bytes per stream: upstream streams only being read (the floor). */
  readonly floorBytesPerStream: number
  /** Bytes per stream held open through the pump. */
  readonly pumpBytesPerStream: number
  /** What the library adds per stream. */
  readonly libraryBytesPerStream: number
  readonly soak: {
    readonly frames: number
    readonly heapMiB: readonly number[]
    readonly growthMiB: number
  }
}

export async function benchMemory(options: {
  streams: number
  soakFrames: number
}): Promise<MemoryResult> {
  const floorBytesPerStream = await heapPerStream(options.streams, async (stream) => {
    const reader = stream.getReader()
    while (!(await reader.read()).done) {
      // only hold the stream open
    }
  })
  const pumpBytesPerStream = await heapPerStream(options.streams, (stream) =>
    deliver({
      gate: createCommitGate(nullSink(), { keepAliveIntervalMs: Number.POSITIVE_INFINITY }),
      body: stream,
      adapter: openaiChat,
    }),
  )

  // Soak: frames made on the fly, heap sampled every tenth of the run.
  const heapMiB: number[] = []
  const step = Math.max(1, Math.floor(options.soakFrames / 10))
  let sent = 0
  const soak = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        controller.enqueue(role)
      },
      pull(controller) {
        if (sent === options.soakFrames) {
          controller.close()
          return
        }
        sent++
        controller.enqueue(text)
        if (sent % step === 0) {
          gc()
          heapMiB.push(process.memoryUsage().heapUsed / 1024 / 1024)
        }
      },
    },
    { highWaterMark: 0 },
  )
  const outcome = await deliver({
    gate: createCommitGate(nullSink(), { keepAliveIntervalMs: Number.POSITIVE_INFINITY }),
    body: soak,
    adapter: openaiChat,
  })
  if (outcome.kind !== 'committed') throw new Error('the soak stream did not commit')
  const settled = heapMiB.slice(1)
  return {
    streams: options.streams,
    floorBytesPerStream,
    pumpBytesPerStream,
    libraryBytesPerStream: pumpBytesPerStream - floorBytesPerStream,
    soak: {
      frames: options.soakFrames,
      heapMiB,
      growthMiB: (settled.at(-1) ?? 0) - (settled[0] ?? 0),
    },
  }
}
