/**
 * The chaos client: sends one streaming request to the gateway, reads it the way an app
 * would (or leaves, or pauses), and records what it got and when.
 *
 * @module
 */

import { createStreamTracker } from '../classify/index.js'
import { joinBytes } from '../protocols/bytes.js'
import type { StreamAdapter } from '../protocols/types.js'
import { createFrameReader } from '../sse/reader.js'
import type { ClientRequest } from './client-request.js'
import type { Observation } from './judge.js'
import type { ClientAction } from './scenarios.js'

/** What one client request saw, with its timings (ms from the request's start). */
export interface ClientRun {
  readonly observation: Observation
  /** The response headers the client got (empty without a response). */
  readonly headers: Readonly<Record<string, string>>
  readonly firstByteMs: number | null
  readonly firstTokenMs: number | null
  /** `performance.now()` when the client left (`disconnect`), else `null`. */
  readonly leftAt: number | null
  readonly durationMs: number
}

/** How the client behaves. */
export interface ClientOptions {
  readonly adapter: StreamAdapter
  /** No end within this many ms is a hang. */
  readonly hangMs: number
  readonly action: ClientAction
  /** `pause`: how long the client stops reading after the first token. */
  readonly pauseMs: number
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const messageOf = (error: unknown): string => {
  const cause = (error as { cause?: unknown })?.cause
  const own = error instanceof Error ? error.message : String(error)
  return cause instanceof Error ? `${own} (${cause.message})` : own
}

/** Sends `request` and reads the answer as `options` say. Never throws. */
export async function runClient(
  request: ClientRequest,
  options: ClientOptions,
): Promise<ClientRun> {
  const started = performance.now()
  const since = () => performance.now() - started
  const controller = new AbortController()
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    controller.abort(new Error('hang bound reached'))
  }, options.hangMs)
  const chunks: Uint8Array[] = []
  let status: number | null = null
  let contentType: string | null = null
  let firstByteMs: number | null = null
  let firstTokenMs: number | null = null
  let leftAt: number | null = null
  let end: Observation['end'] = 'eof'
  let headers: Record<string, string> = {}
  let error: string | undefined
  try {
    const response = await fetch(request.url, { ...request.init, signal: controller.signal })
    status = response.status
    contentType = response.headers.get('content-type')
    headers = Object.fromEntries(response.headers)
    if (response.body !== null) {
      const body = response.body
      const recorded = (async function* () {
        const source = body.getReader()
        for (let read = await source.read(); !read.done; read = await source.read()) {
          firstByteMs ??= since()
          chunks.push(read.value)
          yield read.value
        }
      })()
      const reader = createFrameReader(recorded, { maxFrameBytes: 64 * 1024 * 1024 })
      const tracker = createStreamTracker(options.adapter, { keepReasoningChars: 0 })
      for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
        const kind = tracker.observe(frame).kind
        if (firstTokenMs !== null || (kind !== 'text' && kind !== 'refusal')) continue
        firstTokenMs = since()
        if (options.action === 'disconnect') {
          leftAt = performance.now()
          controller.abort(new Error('the client left'))
          await reader.cancel()
          break
        }
        if (options.action === 'pause') await sleep(options.pauseMs)
      }
    }
  } catch (caught) {
    if (leftAt === null) {
      end = timedOut ? 'timeout' : 'error'
      error = messageOf(caught)
    }
  } finally {
    clearTimeout(timer)
  }
  const observation: Observation = {
    status,
    contentType,
    body: joinBytes(chunks),
    end,
    ...(error === undefined ? {} : { error }),
  }
  return { observation, headers, firstByteMs, firstTokenMs, leftAt, durationMs: since() }
}
