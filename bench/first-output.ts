/**
 * Time to first output added by peek: from the moment the upstream's first output frame is
 * enqueued to the moment the first byte is written downstream, in process, for `deliver()`
 * and for a bare pipe (read a chunk, write it) as the baseline.
 */

import { createCommitGate, type DownstreamSink, deliver, openaiChat } from '../src/index.js'

const encoder = new TextEncoder()
const role = encoder.encode(
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
)
const first = encoder.encode(
  'data: {"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}\n\n',
)
const done = encoder.encode(
  'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
)

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}

/** An upstream whose first output frame is enqueued after a pause; resolves when it is. */
function upstream() {
  let enqueuedAt = 0
  let controller!: ReadableStreamDefaultController<Uint8Array>
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c
      c.enqueue(role)
    },
  })
  const release = () => {
    enqueuedAt = performance.now()
    controller.enqueue(first)
    controller.enqueue(done)
    controller.close()
  }
  return { stream, release, enqueuedAt: () => enqueuedAt }
}

function timingSink(onFirstByte: () => void): DownstreamSink {
  let seen = false
  return {
    signal: new AbortController().signal,
    sendHead() {},
    write() {
      if (!seen) {
        seen = true
        onFirstByte()
      }
    },
    close() {},
    abort() {},
  }
}

export interface FirstOutputResult {
  readonly samples: number
  readonly deliver: { p50: number; p99: number }
  readonly barePipe: { p50: number; p99: number }
  readonly addedP99Ms: number
}

export async function benchFirstOutput(samples: number): Promise<FirstOutputResult> {
  const viaDeliver: number[] = []
  const viaPipe: number[] = []
  for (let i = 0; i < samples; i++) {
    {
      const up = upstream()
      let firstByteAt = 0
      const gate = createCommitGate(
        timingSink(() => (firstByteAt = performance.now())),
        { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
      )
      const pending = deliver({ gate, body: up.stream, adapter: openaiChat })
      await new Promise((resolve) => setImmediate(resolve))
      up.release()
      await pending
      viaDeliver.push(firstByteAt - up.enqueuedAt())
    }
    {
      const up = upstream()
      let firstByteAt = 0
      const sink = timingSink(() => (firstByteAt = performance.now()))
      const reader = up.stream.getReader()
      const pending = (async () => {
        for (let r = await reader.read(); !r.done; r = await reader.read()) {
          if (r.value !== role) sink.write(r.value)
        }
      })()
      await new Promise((resolve) => setImmediate(resolve))
      up.release()
      await pending
      viaPipe.push(firstByteAt - up.enqueuedAt())
    }
  }
  viaDeliver.sort((a, b) => a - b)
  viaPipe.sort((a, b) => a - b)
  const stats = (sorted: number[]) => ({ p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99) })
  return {
    samples,
    deliver: stats(viaDeliver),
    barePipe: stats(viaPipe),
    addedP99Ms: quantile(viaDeliver, 0.99) - quantile(viaPipe, 0.99),
  }
}
