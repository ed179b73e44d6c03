import type { FrameReader, SseFrame } from '../../src/index.js'

const decoder = new TextDecoder()

/** An async iterable over fixed chunks; `onPull(i)` runs before chunk `i` is handed out. */
export function chunkSource(
  chunks: readonly Uint8Array[],
  onPull?: (index: number) => void,
): AsyncIterable<Uint8Array> & { returned: boolean; pulls: number } {
  const source = {
    returned: false,
    pulls: 0,
    async *[Symbol.asyncIterator]() {
      try {
        for (let i = 0; i < chunks.length; i++) {
          source.pulls++
          onPull?.(i)
          await Promise.resolve()
          yield chunks[i] as Uint8Array
        }
        onPull?.(chunks.length)
      } finally {
        source.returned = true
      }
    },
  }
  return source
}

/** A `ReadableStream` over fixed chunks, one chunk per pull. */
export function chunkStream(
  chunks: readonly Uint8Array[],
): ReadableStream<Uint8Array> & { cancelled: unknown } {
  let index = 0
  const state = { cancelled: undefined as unknown }
  const stream = new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        const chunk = chunks[index++]
        if (chunk === undefined) controller.close()
        else controller.enqueue(chunk)
      },
      cancel(reason) {
        state.cancelled = reason ?? true
      },
    },
    { highWaterMark: 0 },
  )
  return Object.defineProperty(stream, 'cancelled', {
    get: () => state.cancelled,
  }) as ReadableStream<Uint8Array> & {
    cancelled: unknown
  }
}

/** Reads every frame to the end. */
export async function readAll(reader: FrameReader): Promise<SseFrame[]> {
  const frames: SseFrame[] = []
  for (let frame = await reader.next(); frame !== null; frame = await reader.next())
    frames.push(frame)
  return frames
}

/** A frame as plain data, for deep equality. */
export function describeFrame(frame: SseFrame) {
  return {
    raw: Array.from(frame.raw),
    terminated: frame.terminated,
    event: frame.event,
    data: frame.data,
    id: frame.id,
    retry: frame.retry,
    comments: [...frame.comments],
  }
}

export function text(bytes: Uint8Array): string {
  return decoder.decode(bytes)
}

export const utf8 = (value: string): Uint8Array => new TextEncoder().encode(value)
