/**
 * Promises per request: how many promises the library creates for one 1-frame answer relayed
 * by `relay()` into `webSink()`, counted with `async_hooks` (every `PROMISE` init), less the
 * host's own (the same host work, making the upstream `Response` and reading the client's body
 * to its end, without the relay). A count, not a time: the same on a loaded machine. Each
 * promise costs little alone, but a host running OpenTelemetry's async-hooks context manager
 * pays for every one.
 */

import { createHook } from 'node:async_hooks'
import { createMemoryKeyPool, createRelay, openaiChat, relay, webSink } from '../src/index.js'
import { openaiChatOneFrame, streamOf } from './inputs.js'
import { checkEnded, drain } from './measure.js'

/** Promises and timers created while `run` runs `requests` times, one after another, per request. */
async function promisesPer(
  requests: number,
  run: () => Promise<void>,
): Promise<{ promises: number; timers: number }> {
  // Warm up first (lazily built module state, the pool's first lease).
  for (let i = 0; i < 20; i++) await run()
  let count = 0
  let timers = 0
  const hook = createHook({
    init(_id, type) {
      if (type === 'PROMISE') count++
      else if (type === 'Timeout') timers++
    },
  })
  hook.enable()
  try {
    for (let i = 0; i < requests; i++) await run()
  } finally {
    hook.disable()
  }
  return { promises: count / requests, timers: timers / requests }
}

export interface PromisesResult {
  readonly requests: number
  /** Promises per request of the host's own work without the library (subtracted). */
  readonly host: number
  /** Promises per request with `relay()` + `webSink()`. */
  readonly relay: number
  /** What the library adds per 1-frame request: `relay - host`. */
  readonly library: number
  /** Timers (`setTimeout`/`setInterval`) the library sets per 1-frame request (the host sets none). */
  readonly timers: number
  /** What the library adds per 1-frame request through a relay built once with `createRelay()`. */
  readonly compiled: number
  /** Timers per 1-frame request through the `createRelay()` relay. */
  readonly compiledTimers: number
}

/** Counts the promises one 1-frame `relay()` + `webSink()` request creates (see the file's head). */
export async function benchPromises(options: { requests: number }): Promise<PromisesResult> {
  const chunks = [openaiChatOneFrame()]
  const pool = createMemoryKeyPool([{ id: 'bench', secret: 'sk-bench' }])
  const upstream = () =>
    new Response(streamOf(chunks), { headers: { 'content-type': 'text/event-stream' } })
  const host = await promisesPer(options.requests, async () => {
    const answer = upstream()
    await drain(answer.body as ReadableStream<Uint8Array>)
  })
  // Answered at once, as the host's baseline makes it (the relay takes a value as well as a
  // promise): the attempt function's own promise is the host's, not the library's.
  const attempt = (() => upstream()) as unknown as () => Promise<Response>
  const policy = { keepAliveIntervalMs: Number.POSITIVE_INFINITY }
  const relayed = await promisesPer(options.requests, async () => {
    const { sink, response } = webSink()
    const outcome = relay({ sink, pool, adapter: openaiChat, policy, attempt })
    await drain((await response).body as ReadableStream<Uint8Array>)
    checkEnded(await outcome)
  })
  const built = createRelay({ pool, adapter: openaiChat, policy, attempt })
  const compiled = await promisesPer(options.requests, async () => {
    const { sink, response } = webSink()
    const outcome = built({ sink })
    await drain((await response).body as ReadableStream<Uint8Array>)
    checkEnded(await outcome)
  })
  return {
    requests: options.requests,
    host: host.promises,
    relay: relayed.promises,
    library: relayed.promises - host.promises,
    timers: relayed.timers - host.timers,
    compiled: compiled.promises - host.promises,
    compiledTimers: compiled.timers - host.timers,
  }
}
