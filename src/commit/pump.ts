/**
 * After commit: write the peeked frames, then every further frame as its exact bytes,
 * through the gate, and end honestly. Also the one-attempt composition `deliver()`.
 *
 * @module
 */

import { classifyEof, type EofClass, type StreamTracker } from '../classify/index.js'
import {
  type DownstreamClosedError,
  isDownstreamClosedError,
  isFrameTooLargeError,
  isUpstreamReadError,
  StreamTimeoutError,
} from '../errors.js'
import { positiveMilliseconds } from '../options.js'
import { type PeekOptions, type PeekOutcome, peekFirstOutput } from '../peek/index.js'
import { errorBodyFor } from '../protocols/common.js'
import type { RenderableError, StreamAdapter } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import { createFrameReader, type FrameReader, type FrameSource } from '../sse/reader.js'
import { FrameSplitter } from '../sse/splitter.js'
import type { CommitGate } from './gate.js'

/** How the pump ends a stream whose end was not clean. */
export interface PumpPolicy {
  /**
   * Output, then EOF without a terminal event: `error` writes the protocol's error frame
   * (honest); `synthesize-stop` writes a clean end.
   * @default 'error'
   */
  onPartialEof?: 'error' | 'synthesize-stop' | undefined
  /**
   * Reasoning only, then EOF: `error` writes an error frame; `promote-reasoning` writes the
   * reasoning as answer text, then a clean end.
   * @default 'error'
   */
  onThinkingOnly?: 'error' | 'promote-reasoning' | undefined
  /**
   * After commit, end the stream with an error frame when no frame other than a keep-alive
   * arrived for this long (keep-alives cannot hide a dead stream).
   * @default undefined (off)
   * @example { idleTimeoutMs: 60_000 }
   */
  idleTimeoutMs?: number | undefined
  /**
   * A gap between two frames longer than this counts as a stall in the outcome.
   * @default 2_000
   */
  stallThresholdMs?: number | undefined
}

/** Defaults of {@link PumpPolicy}. */
export const pumpDefaults = Object.freeze({
  onPartialEof: 'error' as const,
  onThinkingOnly: 'error' as const,
  stallThresholdMs: 2_000,
})

/** Why the pump wrote an error frame itself. */
export type PumpErrorCause =
  | 'partial-eof'
  | 'thinking-only'
  | 'empty-eof'
  | 'read-error'
  | 'idle-timeout'
  | 'frame-too-large'

/** How a pumped stream ended. A discriminated union on `kind`. */
export type PumpEnd =
  | { readonly kind: 'completed' }
  | { readonly kind: 'upstream-error' }
  | { readonly kind: 'stop-synthesized' }
  | { readonly kind: 'reasoning-promoted' }
  | {
      readonly kind: 'error-written'
      readonly cause: PumpErrorCause
      readonly error: RenderableError
    }
  | { readonly kind: 'downstream-closed'; readonly error: DownstreamClosedError }
  | { readonly kind: 'aborted'; readonly reason: unknown }

/** The frames' bytes as one array: a view when they lie side by side in one chunk. */
function joinRaw(frames: readonly SseFrame[]): Uint8Array {
  const first = (frames[0] as SseFrame).raw
  let length = 0
  let adjacent = true
  let offset = first.byteOffset
  for (const { raw } of frames) {
    adjacent &&= raw.buffer === first.buffer && raw.byteOffset === offset
    offset += raw.length
    length += raw.length
  }
  if (adjacent) return new Uint8Array(first.buffer, first.byteOffset, length)
  const out = new Uint8Array(length)
  let at = 0
  for (const { raw } of frames) {
    out.set(raw, at)
    at += raw.length
  }
  return out
}

/** Gaps between upstream frames after commit. */
export interface StallStats {
  readonly count: number
  readonly totalMs: number
  readonly longestMs: number
  readonly thresholdMs: number
}

/** What {@link pump} reports. */
export interface PumpOutcome {
  readonly end: PumpEnd
  /** The EOF class, when the upstream reached EOF. */
  readonly eof: EofClass | null
  /** Frames written (peeked ones included, rendered ones excluded). */
  readonly frames: number
  /** Content bytes written downstream by this pump. */
  readonly bytes: number
  readonly stalls: StallStats
  readonly durationMs: number
}

/** Options of {@link pump}. */
export interface PumpOptions extends PumpPolicy {
  readonly gate: CommitGate
  /** The frames peek consumed (written first, in order). */
  readonly frames: readonly SseFrame[]
  /** The reader peek handed on. */
  readonly reader: FrameReader
  /** The tracker that observed the peeked frames. */
  readonly tracker: StreamTracker
  /** Rewrites a frame's bytes before they are written (`null` drops the frame). */
  readonly transform?: ((frame: SseFrame) => Uint8Array | null) | undefined
  /** Aborting ends the pump (the host gave up); the upstream is cancelled. */
  readonly signal?: AbortSignal | undefined
}

const now = (): number => performance.now()

/** Validates a pump policy and fills in its defaults; throws a `RangeError` naming a bad option. */
export function normalizePumpPolicy(policy: PumpPolicy) {
  const idle = policy.idleTimeoutMs
  if (idle !== undefined) positiveMilliseconds('idleTimeoutMs', idle)
  const stallThresholdMs = positiveMilliseconds(
    'stallThresholdMs',
    policy.stallThresholdMs ?? pumpDefaults.stallThresholdMs,
  )
  return {
    onPartialEof: policy.onPartialEof ?? pumpDefaults.onPartialEof,
    onThinkingOnly: policy.onThinkingOnly ?? pumpDefaults.onThinkingOnly,
    idleTimeoutMs: idle,
    stallThresholdMs,
  }
}

const endMessages = {
  'partial-eof': 'The upstream stream ended before its final event; the answer is incomplete',
  'thinking-only': 'The upstream sent reasoning but no answer before the stream ended',
  'empty-eof': 'The upstream stream ended without any output',
  'read-error': 'The connection to the upstream was lost mid-stream; the answer is incomplete',
  'frame-too-large': 'The upstream sent a frame larger than the relay accepts',
} as const

/**
 * Pumps a committed stream to its end: the peeked frames, then every further frame as its
 * exact bytes, through the gate. At EOF, `classifyEof` decides: `completed` closes;
 * `partial` and `thinking-only` follow the policy; anything abnormal is written as the
 * protocol's own error frame, never as a fake success. A downstream failure cancels the
 * upstream and stops reading. The upstream body is always released and every timer cleared.
 */
export async function pump(options: PumpOptions): Promise<PumpOutcome> {
  const policy = normalizePumpPolicy(options)
  const { gate, reader, tracker, transform } = options
  const adapter = tracker.adapter
  const started = now()
  let frames = 0
  const bytesAtStart = gate.bytesWritten
  const stalls = { count: 0, totalMs: 0, longestMs: 0, thresholdMs: policy.stallThresholdMs }
  let eof: EofClass | null = null

  const stop = new AbortController()
  const onGateAbort = () => stop.abort(gate.signal.reason)
  const onHostAbort = () => stop.abort(options.signal?.reason)
  for (const [signal, listener] of [
    [gate.signal, onGateAbort],
    [options.signal, onHostAbort],
  ] as const) {
    if (signal?.aborted) listener()
    else signal?.addEventListener('abort', listener, { once: true })
  }

  // Idle watchdog: one timer, re-armed lazily from the last real frame.
  let lastActivity = now()
  let idleTimer: ReturnType<typeof setTimeout> | undefined
  const idleMs = policy.idleTimeoutMs
  const armIdle = (delay: number) => {
    idleTimer = setTimeout(() => {
      const quiet = now() - lastActivity
      if (quiet >= (idleMs as number)) stop.abort(new StreamTimeoutError('idle', idleMs as number))
      else armIdle((idleMs as number) - quiet)
    }, delay)
    ;(idleTimer as { unref?: () => void }).unref?.()
  }
  if (idleMs !== undefined) armIdle(idleMs)

  const write = async (frame: SseFrame) => {
    const bytes = transform === undefined ? frame.raw : transform(frame)
    if (bytes !== null && bytes.length > 0) await gate.write(bytes)
    frames++
  }

  /** Writes library-rendered bytes and lets the tracker see them, so its state stays true. */
  const writeRendered = async (bytes: Uint8Array) => {
    const splitter = new FrameSplitter(Math.max(bytes.length, 1))
    splitter.push(bytes)
    for (let frame = splitter.take(); frame !== null; frame = splitter.take())
      tracker.observe(frame)
    await gate.write(bytes)
  }

  const endWith = async (cause: PumpErrorCause, error: RenderableError): Promise<PumpEnd> => {
    await writeRendered(adapter.renderError(error, tracker.state))
    await gate.close()
    return { kind: 'error-written', cause, error }
  }

  const atEof = async (): Promise<PumpEnd> => {
    eof = classifyEof(tracker.state)
    switch (eof.kind) {
      case 'completed':
        await gate.close()
        return { kind: 'completed' }
      case 'error-only':
        // The upstream's own error frame already went out, in its protocol.
        await gate.close()
        return { kind: 'upstream-error' }
      case 'partial':
        if (tracker.state.errors > 0) {
          await gate.close()
          return { kind: 'upstream-error' }
        }
        if (policy.onPartialEof === 'synthesize-stop') {
          await writeRendered(adapter.renderStop(tracker.state))
          await gate.close()
          return { kind: 'stop-synthesized' }
        }
        return endWith('partial-eof', {
          type: 'upstream_error',
          message: endMessages['partial-eof'],
        })
      case 'thinking-only':
        if (policy.onThinkingOnly === 'promote-reasoning') {
          await writeRendered(adapter.renderReasoningAsText(tracker.state))
          await writeRendered(adapter.renderStop(tracker.state))
          await gate.close()
          return { kind: 'reasoning-promoted' }
        }
        return endWith('thinking-only', {
          type: 'upstream_error',
          message: endMessages['thinking-only'],
        })
      case 'empty':
        return endWith('empty-eof', { type: 'upstream_error', message: endMessages['empty-eof'] })
    }
  }

  const run = async (): Promise<PumpEnd> => {
    for (const frame of options.frames) await write(frame)
    let previous = now()
    for (;;) {
      let frame: SseFrame | null
      try {
        // Hot spot (bench "whole pump"): one promise per upstream chunk here and one per write
        // below are most of the pump's cost over a bare read loop (~3× at one frame per chunk).
        frame = await reader.next({ signal: stop.signal })
      } catch (error) {
        const downstreamGone =
          stop.signal.aborted &&
          error === stop.signal.reason &&
          !(error instanceof StreamTimeoutError)
        // After the upstream's terminal event the answer is whole: a late stall or break ends it cleanly.
        if (tracker.state.terminalSeen && !downstreamGone) {
          if (!isUpstreamReadError(error)) await reader.cancel(error)
          return atEof()
        }
        if (stop.signal.aborted && error === stop.signal.reason) {
          if (error instanceof StreamTimeoutError) {
            return endWith('idle-timeout', { type: 'timeout', message: error.message })
          }
          if (isDownstreamClosedError(error)) return { kind: 'downstream-closed', error }
          return { kind: 'aborted', reason: error }
        }
        if (isUpstreamReadError(error)) {
          return endWith('read-error', {
            type: 'upstream_error',
            message: endMessages['read-error'],
          })
        }
        if (isFrameTooLargeError(error)) {
          return endWith('frame-too-large', {
            type: 'upstream_error',
            message: endMessages['frame-too-large'],
          })
        }
        throw error
      }
      if (frame === null) return atEof()
      const arrived = now()
      const gap = arrived - previous
      previous = arrived
      if (gap > stalls.thresholdMs) {
        stalls.count++
        stalls.totalMs += gap
        stalls.longestMs = Math.max(stalls.longestMs, gap)
      }
      if (tracker.observeCommitted(frame) !== 'keepalive') lastActivity = arrived
      // Frames that came in the same upstream chunk go out in one write, as a byte pipe's would.
      const batch = [frame]
      for (;;) {
        let more: SseFrame | null
        try {
          more = reader.takeBuffered()
        } catch {
          // The reader keeps the failure: the next read reports it, after this batch is out.
          break
        }
        if (more === null) break
        if (tracker.observeCommitted(more) !== 'keepalive') lastActivity = arrived
        batch.push(more)
      }
      if (batch.length === 1 || transform !== undefined) {
        for (const each of batch) await write(each)
      } else {
        await gate.write(joinRaw(batch))
        frames += batch.length
      }
    }
  }

  let end: PumpEnd
  try {
    end = await run()
  } catch (error) {
    if (!isDownstreamClosedError(error)) throw error
    end = { kind: 'downstream-closed', error }
  } finally {
    if (idleTimer !== undefined) clearTimeout(idleTimer)
    gate.signal.removeEventListener('abort', onGateAbort)
    options.signal?.removeEventListener('abort', onHostAbort)
  }
  if (end.kind === 'downstream-closed' || end.kind === 'aborted') {
    await reader.cancel(end.kind === 'downstream-closed' ? end.error : end.reason)
    if (end.kind === 'aborted') gate.abort(end.reason)
  } else if (!reader.done) {
    await reader.cancel()
  }
  return {
    end,
    eof,
    frames,
    bytes: gate.bytesWritten - bytesAtStart,
    stalls: { ...stalls },
    durationMs: now() - started,
  }
}

/**
 * Ends a request that failed before content: with a real status and the protocol's JSON
 * error body while headers are uncommitted, else in-band with the protocol's error frame.
 */
export async function failBeforeContent(
  gate: CommitGate,
  adapter: StreamAdapter,
  status: number,
  error: RenderableError,
  headers?: HeadersInit,
): Promise<void> {
  if (gate.state === 'closed') return
  if (gate.state === 'open') {
    await gate.respond(status, errorBodyFor(adapter, { status, ...error }), headers)
    return
  }
  await gate.write(adapter.renderError(error))
  await gate.close()
}

/** Options of {@link deliver}. */
export interface DeliverOptions extends PumpPolicy {
  readonly gate: CommitGate
  /** The upstream body, or a reader over it. */
  readonly body: FrameSource | FrameReader
  readonly adapter: StreamAdapter
  /** Peek options (the signal is `signal`). */
  readonly peek?: Omit<PeekOptions, 'signal'> | undefined
  /** Options of the frame reader created over `body`. */
  readonly maxFrameBytes?: number | undefined
  /** Rewrites a frame's bytes before they are written (`null` drops the frame). */
  readonly transform?: ((frame: SseFrame) => Uint8Array | null) | undefined
  /** Aborting ends the attempt, before or after commit (the host gave up). */
  readonly signal?: AbortSignal | undefined
  /** Aborting ends the peek only (a pre-commit deadline); it is ignored once committed. */
  readonly peekSignal?: AbortSignal | undefined
  /** Called once, when the first output arrived and before anything is written. */
  readonly onCommit?: ((peek: Extract<PeekOutcome, { kind: 'output' }>) => void) | undefined
}

/** What {@link deliver} reports. */
export type DeliverOutcome =
  | {
      readonly kind: 'committed'
      readonly peek: Extract<PeekOutcome, { kind: 'output' }>
      readonly pump: PumpOutcome
    }
  | { readonly kind: 'not-committed'; readonly peek: Exclude<PeekOutcome, { kind: 'output' }> }

function isReader(body: FrameSource | FrameReader): body is FrameReader {
  return (
    typeof (body as FrameReader).next === 'function' &&
    typeof (body as FrameReader).cancel === 'function'
  )
}

/**
 * One attempt over one upstream body: (with `earlyHeaders`, commit headers first,) peek for
 * the first output, and on output commit and pump to the end. On any other peek outcome
 * nothing reaches the client and the upstream body is released: the caller may retry.
 */
export async function deliver(options: DeliverOptions): Promise<DeliverOutcome> {
  const { gate, adapter } = options
  const reader = isReader(options.body)
    ? options.body
    : createFrameReader(
        options.body,
        options.maxFrameBytes === undefined ? {} : { maxFrameBytes: options.maxFrameBytes },
      )
  const signals = [gate.signal, options.signal, options.peekSignal].filter(
    (s): s is AbortSignal => s !== undefined,
  )
  const signal = signals.length === 1 ? signals[0] : AbortSignal.any(signals)
  try {
    if (gate.earlyHeaders) await gate.commitHeaders()
  } catch (error) {
    await reader.cancel(error)
    throw error
  }
  const peeked = await peekFirstOutput(reader, adapter, { ...options.peek, signal })
  if (peeked.kind !== 'output') {
    await reader.cancel(peeked.kind === 'aborted' ? peeked.reason : undefined)
    return { kind: 'not-committed', peek: peeked }
  }
  options.onCommit?.(peeked)
  const pumped = await pump({
    ...options,
    gate,
    frames: peeked.frames,
    reader: peeked.reader,
    tracker: peeked.tracker,
  })
  return { kind: 'committed', peek: peeked, pump: pumped }
}
