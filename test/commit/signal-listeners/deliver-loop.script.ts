/**
 * Run by signal-listeners.test.ts under `node --expose-gc`: sequential `deliver` calls that all
 * share one long-lived host signal, as a server passing its shutdown signal to every request
 * would. Prints the heap after a warm-up and after the run (both after a full GC), and every
 * process warning.
 */
import { createCommitGate, deliver, openaiChat } from '../../../src/index.js'
import { createRecordingSink } from '../../../src/testing/recording-sink.js'

const runs = Number(process.argv[2] ?? 20_000)
const warmUp = 2_000
const stream =
  'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n' +
  'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
const warnings: string[] = []
process.on('warning', (warning) => warnings.push(`${warning.name}: ${warning.message}`))

const host = new AbortController()
const gc = (globalThis as { gc?: () => void }).gc as () => void

async function once(): Promise<void> {
  const gate = createCommitGate(createRecordingSink(), {
    keepAliveIntervalMs: Number.POSITIVE_INFINITY,
  })
  const outcome = await deliver({
    gate,
    body: new Response(stream).body as ReadableStream<Uint8Array>,
    adapter: openaiChat,
    signal: host.signal,
    peekSignal: host.signal,
  })
  if (outcome.kind !== 'committed' || outcome.pump.end.kind !== 'completed') {
    throw new Error(`unexpected outcome ${outcome.kind}`)
  }
}

const heap = async (): Promise<number> => {
  // Let finalizers and weak callbacks run between collections.
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
  return process.memoryUsage().heapUsed
}

for (let i = 0; i < warmUp; i++) await once()
const before = await heap()
for (let i = 0; i < runs; i++) await once()
const after = await heap()
process.stdout.write(`${JSON.stringify({ runs, before, after, warnings })}\n`)
