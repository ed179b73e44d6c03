/**
 * What the faulty upstream streams for each fault: a table with one entry per
 * {@link FaultKind}, so a new kind does not compile until its steps are written.
 *
 * @module
 */

import type { Fault, FaultKind } from './faults.js'
import type { WireWriter } from './wire-format.js'

/** One step of a played body: bytes, a pause, a hang until cancelled, or a connection reset. */
export type Step = string | Uint8Array | { wait: number } | { hang: true } | { reset: true }

/** What a fault's steps are made from. */
export interface StepContext {
  readonly fault: Fault
  readonly wire: WireWriter
  /** The answer, its attempt tag included. */
  readonly answer: string
  /** The reasoning, its attempt tag included. */
  readonly thought: string
  readonly tag: string
  readonly frameDelayMs: number
  readonly keepAliveMs: number
}

const encoder = new TextEncoder()

/** Word pieces, each with the spaces after it (the first also with any before it: a continuation's). */
function words(text: string): string[] {
  return text.match(/^\s*\S+\s*|\S+\s*/g) ?? [text]
}

/** Frames `gap` ms apart (none for a gap of 0). */
function spaced(frames: string[], gap: number): Step[] {
  return frames.flatMap((frame, i) => (i === 0 || gap === 0 ? [frame] : [{ wait: gap }, frame]))
}

/** The answer's frames, without the finish. */
function answerFrames({ wire, answer }: StepContext): string[] {
  return [...wire.start(), ...words(answer).flatMap((word) => wire.text(word))]
}

/** The whole answer, frames `frameDelayMs` apart. */
function whole(context: StepContext): Step[] {
  return spaced([...answerFrames(context), ...context.wire.finish('stop')], context.frameDelayMs)
}

/** Half the answer, then a clean end of the body inside the next frame's data line. */
function eofMidFrame(context: StepContext): Step[] {
  const frames = answerFrames(context)
  const half = Math.max(context.wire.start().length + 1, Math.floor(frames.length / 2))
  const next = frames[half] ?? ''
  return spaced(
    [...frames.slice(0, half), next.slice(0, next.indexOf('{') + 12)],
    context.frameDelayMs,
  )
}

/** Two bytes that are not UTF-8, inside the text of the last delta. */
function invalidUtf8({ wire, answer }: StepContext): Step[] {
  const parts = words(answer)
  const last = parts.pop() ?? ''
  const head = [...wire.start(), ...parts.flatMap((word) => wire.text(word))]
  const frame = encoder.encode(wire.text(last).join(''))
  const quoted = encoder.encode(JSON.stringify(last))
  let at = frame.length - quoted.length
  while (at > 0 && !quoted.every((byte, i) => frame[at + i] === byte)) at--
  const bad = new Uint8Array(frame.length + 2)
  bad.set(frame.subarray(0, at + 1))
  bad.set([0xff, 0xfe], at + 1)
  bad.set(frame.subarray(at + 1), at + 3)
  return [...head, bad, ...wire.finish('stop')]
}

/** Answered by its status and body alone (see the status faults): no stream is played. */
const noStream = (): Step[] => []

/** The steps of every fault kind. */
export const faultSteps: Readonly<Record<FaultKind, (context: StepContext) => Step[]>> = {
  ok: whole,
  'slow-drip': (context) =>
    spaced(
      [...answerFrames(context), ...context.wire.finish('stop')],
      context.fault.delayMs ?? 300,
    ),
  empty: () => [],
  'hang-before-headers': noStream,
  'headers-then-hang': () => [{ hang: true }],
  'keepalives-only': ({ fault, keepAliveMs }) => {
    const count = fault.forMs === undefined ? 10_000 : Math.ceil(fault.forMs / keepAliveMs)
    return Array.from({ length: count }, (): Step[] => [
      ': keep-alive\n\n',
      { wait: keepAliveMs },
    ]).flat()
  },
  'role-only-then-stall': ({ wire, fault }) => [
    ...wire.start(),
    fault.forMs === undefined ? { hang: true } : { wait: fault.forMs },
  ],
  'error-frame': ({ wire }) => [
    ...wire.start(),
    wire.error(true, 'The upstream is overloaded, try again'),
  ],
  'fatal-error-frame': ({ wire }) => [...wire.start(), wire.error(false, 'The request is invalid')],
  'rate-limited': noStream,
  overloaded: noStream,
  'html-500': noStream,
  'json-error-200': noStream,
  'html-200': noStream,
  'partial-then-cut': ({ wire, answer, frameDelayMs }) => {
    const half = words(answer)
    half.length = Math.max(1, Math.floor(half.length / 2))
    return spaced([...wire.start(), ...half.flatMap((word) => wire.text(word))], frameDelayMs)
  },
  'thinking-only': ({ wire, thought, frameDelayMs }) =>
    spaced(
      [...wire.start(), ...words(thought).flatMap((word) => wire.reasoning(word))],
      frameDelayMs,
    ),
  'reset-mid-frame': (context) => {
    const frames = answerFrames(context)
    const next = frames[frames.length - 1] ?? ''
    return [...frames.slice(0, -1), next.slice(0, 12), { reset: true }]
  },
  'oversized-frame': ({ wire, tag }) => [
    ...wire.start(),
    ...wire.text(`${tag}${'x'.repeat(2 * 1024 * 1024)}`),
    ...wire.finish('stop'),
  ],
  'invalid-utf8': invalidUtf8,
  'no-final-blank-line': (context) => {
    const frames = [...answerFrames(context), ...context.wire.finish('stop')]
    const last = frames.pop() ?? ''
    return [...frames, last.replace(/\n+$/, '')]
  },
  'eof-mid-frame': eofMidFrame,
  'eof-mid-frame-close': eofMidFrame,
  // Streamed whole when the request gets past its refusal (a plain request, a fitted budget).
  'streaming-unsupported': whole,
  'context-overflow': whole,
}
