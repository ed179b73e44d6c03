/**
 * The chaos client: sends one streaming request to the gateway, reads it the way an app
 * would (or leaves, or pauses), and records what it got and when.
 *
 * @module
 */

import { createStreamTracker } from '../classify/index.js'
import { isFrameTooLargeError } from '../errors.js'
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

/**
 * The most body a client keeps: far more than any scenario's answer (a few hundred bytes),
 * far less than a gateway that streams without end would grow it to. Past it, or in one frame
 * past it, the client stops reading and the judge says why, with memory bounded.
 * @internal exported for tests
 */
export const maxClientBodyBytes = 8 * 1024 * 1024

/** The client stopped reading a body past {@link maxClientBodyBytes}. */
class BodyTooLargeError extends Error {}

// A frame that never ends is the body's bound too: the frame reader's bound is the same.
const tooLargeMessage = `the body passed ${maxClientBodyBytes} bytes with no end (the client stopped reading)`

const messageOf = (error: unknown): string => {
  const cause = (error as { cause?: unknown })?.cause
  const own = error instanceof Error ? error.message : String(error)
  return cause instanceof Error ? `${own} (${cause.message})` : own
}

/** A body or one frame past the bound the client keeps. */
function tooLarge(error: unknown): boolean {
  // The frame reader wraps what its source threw.
  const cause = (error as { cause?: unknown } | undefined)?.cause
  return [error, cause].some(
    (each) => each instanceof BodyTooLargeError || isFrameTooLargeError(each),
  )
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
      let kept = 0
      const recorded = (async function* () {
        const source = body.getReader()
        for (let read = await source.read(); !read.done; read = await source.read()) {
          firstByteMs ??= since()
          kept += read.value.length
          if (kept > maxClientBodyBytes) {
            chunks.push(read.value.subarray(0, read.value.length - (kept - maxClientBodyBytes)))
            throw new BodyTooLargeError(tooLargeMessage)
          }
          chunks.push(read.value)
          yield read.value
        }
      })()
      const reader = createFrameReader(recorded, { maxFrameBytes: maxClientBodyBytes })
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
      end = timedOut ? 'timeout' : tooLarge(caught) ? 'too-large' : 'error'
      error = end === 'too-large' ? tooLargeMessage : messageOf(caught)
    }
    // Stop the gateway's stream: nothing more of it is read.
    if (!controller.signal.aborted) controller.abort(caught)
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
