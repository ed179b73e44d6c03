/**
 * What the faulty upstream answers a plain (non-streaming) request for each fault: a table with
 * one entry per {@link FaultKind}, so a new kind does not compile until its plain form is
 * chosen. A stream fault is played as what a plain answer suffers from the same failure (an
 * empty body, a body cut short, a body that never comes); a fault with no plain form is refused
 * with an error that names it, never answered as a complete 200.
 *
 * @module
 */

import type { Step, StepContext } from './fault-steps.js'
import type { FaultKind } from './faults.js'

/** A plain answer: the steps of a `200 application/json` body, or a refusal that says why. */
type PlainPlay = { readonly steps: readonly Step[] } | { readonly refused: string }

const encoder = new TextEncoder()

/** The whole JSON answer, as bytes. */
function answerBytes({ wire, answer }: StepContext): Uint8Array {
  return encoder.encode(JSON.stringify(wire.message(answer)))
}

/** The first half of the JSON answer: a body that ends inside the answer's text. */
function firstHalf(context: StepContext): Uint8Array {
  const bytes = answerBytes(context)
  return bytes.subarray(0, Math.floor(bytes.length / 2))
}

/** The whole answer in `pieces` slices `gap` ms apart. */
function dripped(bytes: Uint8Array, pieces: number, gap: number): Step[] {
  const size = Math.ceil(bytes.length / pieces)
  const steps: Step[] = []
  for (let at = 0; at < bytes.length; at += size) {
    if (at > 0) steps.push({ wait: gap })
    steps.push(bytes.subarray(at, at + size))
  }
  return steps
}

/** Two bytes that are not UTF-8, inside the answer's text. */
function invalidUtf8(context: StepContext): Step[] {
  const bytes = answerBytes(context)
  const quoted = encoder.encode(JSON.stringify(context.answer))
  let at = bytes.length - quoted.length
  while (at > 0 && !quoted.every((byte, i) => bytes[at + i] === byte)) at--
  const bad = new Uint8Array(bytes.length + 2)
  bad.set(bytes.subarray(0, at + 1))
  bad.set([0xff, 0xfe], at + 1)
  bad.set(bytes.subarray(at + 1), at + 3)
  return [bad]
}

/** Status faults are answered before a body is chosen (their status and body are the fault). */
const byStatus = (): PlainPlay => ({ steps: [] })

const whole = (context: StepContext): PlainPlay => ({ steps: [answerBytes(context)] })

/**
 * The plain form of every fault kind. Faults that only a stream can have (a frame without its
 * blank line) are refused: answered `501` with the protocol's error body naming the fault.
 */
export const plainPlays: Readonly<Record<FaultKind, (context: StepContext) => PlainPlay>> = {
  ok: whole,
  'slow-drip': (context) => ({
    steps: dripped(answerBytes(context), 8, context.fault.delayMs ?? 300),
  }),
  // A 200 whose body is empty: the plain twin of a stream that ends before any frame.
  empty: () => ({ steps: [] }),
  'hang-before-headers': byStatus,
  'headers-then-hang': () => ({ steps: [{ hang: true }] }),
  // Whitespace while the answer is "being prepared", then a body with no answer in it.
  'keepalives-only': ({ fault, keepAliveMs }) => {
    const count = fault.forMs === undefined ? 10_000 : Math.ceil(fault.forMs / keepAliveMs)
    return {
      steps: Array.from({ length: count }, (): Step[] => ['\n', { wait: keepAliveMs }]).flat(),
    }
  },
  'role-only-then-stall': ({ fault }) => ({
    steps: [fault.forMs === undefined ? { hang: true } : { wait: fault.forMs }],
  }),
  // The error where the answer should be, under the 200 the stream had: retryable, then fatal.
  'error-frame': ({ wire }) => ({
    steps: [wire.errorBody(wire.overloadType, 'The upstream is overloaded, try again', 529)],
  }),
  'fatal-error-frame': ({ wire }) => ({
    steps: [wire.errorBody(wire.invalidRequestType, 'The request is invalid', 400)],
  }),
  'rate-limited': byStatus,
  overloaded: byStatus,
  'html-500': byStatus,
  'json-error-200': byStatus,
  'html-200': byStatus,
  // Half the JSON, then a clean end of the body.
  'partial-then-cut': (context) => ({ steps: [firstHalf(context)] }),
  // A plain answer hides reasoning: the answer has no text.
  'thinking-only': ({ wire }) => ({ steps: [JSON.stringify(wire.message(''))] }),
  'reset-mid-frame': (context) => ({ steps: [firstHalf(context), { reset: true }] }),
  'oversized-frame': (context) => ({
    steps: [JSON.stringify(context.wire.message(`${context.tag}${'x'.repeat(2 * 1024 * 1024)}`))],
  }),
  'invalid-utf8': (context) => ({ steps: invalidUtf8(context) }),
  'no-final-blank-line': () => ({
    refused:
      'no-final-blank-line is a fault of SSE framing and a plain answer has no frames: send a streaming request, or script partial-then-cut or eof-mid-frame for a plain one',
  }),
  'eof-mid-frame': (context) => ({ steps: [firstHalf(context)] }),
  'eof-mid-frame-close': (context) => ({ steps: [firstHalf(context)] }),
  // The refusal is of streaming: a plain request gets the answer.
  'streaming-unsupported': whole,
  // A request that fits the window gets the answer (one that does not is refused by status).
  'context-overflow': whole,
}
