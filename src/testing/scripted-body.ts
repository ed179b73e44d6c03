/**
 * A scripted upstream body: a `ReadableStream` that sends bytes, waits, hangs or fails on
 * cue, and records how it was released. For tests of anything that reads an upstream.
 *
 * @module
 */

/**
 * One step of a script.
 *
 * @group Test doubles
 */
export type ScriptStep =
  | { readonly bytes: Uint8Array | string }
  | { readonly wait: number }
  | { readonly hang: true }
  | { readonly error: unknown }

/**
 * A scripted body and what happened to it.
 *
 * @group Test doubles
 */
export interface ScriptedBody {
  readonly stream: ReadableStream<Uint8Array>
  /** True once the reader cancelled the stream. */
  readonly cancelled: boolean
  /** The reason the stream was cancelled with. */
  readonly cancelReason: unknown
  /** True once the script ran to its end (closed or errored). */
  readonly finished: boolean
  /** True when the body was released: cancelled, or read to its end. */
  readonly released: boolean
  /** Chunks handed out so far. */
  readonly chunksSent: number
}

const encoder = new TextEncoder()

/**
 * Creates a body that follows `steps`, one chunk per pull. `wait` uses `setTimeout`, so it
 * follows fake timers; `hang` waits until the stream is cancelled.
 *
 * @example
 * const body = scriptedBody([{ bytes: 'data: {"choices":[]}\n\n' }, { hang: true }])
 * // … read body.stream, then: expect(body.cancelled).toBe(true)
 *
 * @group Test doubles
 */
export function scriptedBody(steps: readonly ScriptStep[]): ScriptedBody {
  let index = 0
  let cancelled = false
  let cancelReason: unknown
  let finished = false
  let chunksSent = 0
  let wake: (() => void) | undefined
  const stream = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          const step = steps[index++]
          if (step === undefined) {
            finished = true
            controller.close()
            return
          }
          if ('bytes' in step) {
            chunksSent++
            controller.enqueue(
              typeof step.bytes === 'string' ? encoder.encode(step.bytes) : step.bytes,
            )
            return
          }
          if ('error' in step) {
            finished = true
            controller.error(step.error)
            return
          }
          let timer: ReturnType<typeof setTimeout> | undefined
          await new Promise<void>((resolve) => {
            wake = resolve
            if ('wait' in step) timer = setTimeout(resolve, step.wait)
          })
          // A cancel wakes the step early: its timer must not outlive the body.
          clearTimeout(timer)
          wake = undefined
          if (cancelled) return
        }
      },
      cancel(reason) {
        cancelled = true
        cancelReason = reason
        wake?.()
      },
    },
    { highWaterMark: 0 },
  )
  return {
    stream,
    get cancelled() {
      return cancelled
    },
    get cancelReason() {
      return cancelReason
    },
    get finished() {
      return finished
    },
    get released() {
      return cancelled || finished
    },
    get chunksSent() {
      return chunksSent
    },
  }
}
