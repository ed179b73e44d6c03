/**
 * The judge: what a gateway's client really got, read with the library's own adapters and
 * EOF classifier. Pure: it takes the bytes and the way the response ended, never a socket.
 *
 * @module
 */

import { classifyEof, createStreamTracker } from '../classify/index.js'
import type { StreamAdapter } from '../protocols/types.js'
import { createFrameReader } from '../sse/reader.js'

/** What the client saw of one response. */
export interface Observation {
  /** The response status, or `null` when no response headers came. */
  readonly status: number | null
  readonly contentType: string | null
  /** Every body byte the client read. */
  readonly body: Uint8Array
  /**
   * `eof`: the body ended; `error`: the request or body failed; `timeout`: no end in time;
   * `too-large`: the body (or one frame) grew past what the client keeps with no end.
   */
  readonly end: 'eof' | 'error' | 'timeout' | 'too-large'
  /** The failure's message, for `error` and `too-large`. */
  readonly error?: string
}

/** Every client-visible outcome. */
export type OutcomeKind =
  | 'full'
  | 'promoted'
  | 'honest-error'
  | 'silent-empty'
  | 'silent-cut'
  | 'duplicate'
  | 'hang'

/** The outcomes that make the command fail. */
export const badOutcomes: ReadonlySet<OutcomeKind> = new Set([
  'silent-empty',
  'silent-cut',
  'duplicate',
  'hang',
])

/** The judge's verdict on one response. */
export interface Judgement {
  readonly kind: OutcomeKind
  /** One line saying why. */
  readonly reason: string
  /** The upstream attempts whose output reached the client (from the answers' attempt tags). */
  readonly attemptsSeen: readonly number[]
  /** Answer characters the client got. */
  readonly textChars: number
}

/** What the judge compares the client's text with. */
export interface JudgeOptions {
  readonly adapter: StreamAdapter
  /** The upstream's answer, without its attempt tag. */
  readonly answer: string
  /** The upstream's reasoning, without its attempt tag (a promoted answer). */
  readonly reasoning: string
  /** Other texts that count as the whole answer. */
  readonly otherAnswers?: readonly string[]
}

const tagPattern = /\[attempt (\d+)\] /g
// Bigger than any frame the upstream writes, so the judge sees what a lenient client sees.
const judgeMaxFrameBytes = 64 * 1024 * 1024

interface Read {
  text: string
  reasoning: string
  errors: number
  firstError: string | undefined
  terminal: boolean
  eof: string
}

/**
 * Whether the protocol's official SDK raises on bytes that are not whole event-stream frames.
 * `@google/genai` does: a body whose end leaves anything after its last frame (a frame the
 * end cut, a page or a JSON body that is no stream at all) throws "Incomplete JSON segment".
 * The `openai` and `@anthropic-ai/sdk` readers drop such bytes and raise nothing.
 */
function raisesOnLeftover(adapter: StreamAdapter): boolean {
  return adapter.name === 'gemini'
}

async function readSse(body: Uint8Array, adapter: StreamAdapter): Promise<Read> {
  const reader = createFrameReader(
    (async function* () {
      yield body
    })(),
    { maxFrameBytes: judgeMaxFrameBytes },
  )
  const tracker = createStreamTracker(adapter, { keepReasoningChars: 0 })
  const read: Read = {
    text: '',
    reasoning: '',
    errors: 0,
    firstError: undefined,
    terminal: false,
    eof: '',
  }
  let leftover = false
  for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
    if (!frame.terminated && decoder.decode(frame.raw).trim() !== '') leftover = true
    // The official SDKs act on whole frames with data only (a frame the body's end cut is
    // dropped, as the SSE spec says), and Anthropic's on known events only: an HTML page or
    // bare JSON sent as an event stream, or a cut last frame, is no error event to them.
    // An event without data is one too (Anthropic's SDK raises on a bare `event: error`).
    if (
      !frame.terminated ||
      (frame.data === undefined && frame.event === undefined) ||
      adapter.clientIgnores?.(frame) === true
    )
      continue
    if (adapter.clientEndsAt?.(frame) === true) {
      // The SDK reads no further and raises nothing here: the end marker counts as the
      // protocol reads it (Chat's `[DONE]` is its end event), unless the protocol has no such
      // marker and would call it a malformed frame (Responses).
      if (adapter.inspect(frame).kind !== 'error') tracker.observe(frame)
      break
    }
    const verdict = tracker.observe(frame)
    if (verdict.kind === 'text' || verdict.kind === 'refusal') read.text += verdict.text
    else if (verdict.kind === 'reasoning') read.reasoning += verdict.text
    else if (verdict.kind === 'error') read.firstError ??= verdict.error.message
  }
  const state = tracker.state
  read.errors = state.errors
  if (leftover && raisesOnLeftover(adapter)) {
    read.errors++
    read.firstError ??= 'the body ended inside a frame (the SDK raises: incomplete JSON segment)'
  }
  read.terminal = state.terminalSeen
  read.eof = classifyEof(state).kind
  return read
}

function tagsOf(text: string): number[] {
  return [...new Set([...text.matchAll(tagPattern)].map((match) => Number(match[1])))].sort(
    (a, b) => a - b,
  )
}

const decoder = new TextDecoder()
const short = (text: string, max = 60) =>
  text.length > max ? `${text.slice(0, max - 1)}…` : text.replace(/\s+/g, ' ')

/**
 * A 2xx body that is not an event stream, for a request that asked for one. The `openai` and
 * `@anthropic-ai/sdk` clients read it as a stream with no events: their raw iteration yields
 * nothing and raises nothing, whether it held the whole answer as JSON, a JSON error or a
 * page. So it is a silent failure (the judge follows raw iteration; `messages.stream()`
 * helpers that throw on an empty stream would have told, their users are the minority).
 * `@google/genai` raises on any such body that is not empty: an honest error for Gemini.
 */
function judgeNonStream(observation: Observation, adapter: StreamAdapter): Judgement {
  const body = decoder.decode(observation.body)
  const attemptsSeen = tagsOf(body)
  const type = observation.contentType ?? 'no content-type'
  if (attemptsSeen.length > 1)
    return {
      kind: 'duplicate',
      reason: `a ${type} body with output of attempts ${attemptsSeen.join(' and ')}`,
      attemptsSeen,
      textChars: body.length,
    }
  let what = `${observation.body.length} bytes`
  try {
    const parsed = JSON.parse(body) as Record<string, unknown>
    what =
      parsed.error !== undefined || parsed.type === 'error'
        ? 'a JSON error body'
        : attemptsSeen.length === 1
          ? 'the answer as one JSON body'
          : 'a JSON body'
  } catch {
    // Not JSON: a page or junk.
  }
  if (raisesOnLeftover(adapter) && body.trim() !== '') {
    return {
      kind: 'honest-error',
      reason: `${observation.status} ${type} with ${what}, not a stream: the SDK raises (incomplete JSON segment)`,
      attemptsSeen,
      textChars: 0,
    }
  }
  return {
    kind: 'silent-empty',
    reason: `${observation.status} ${type} with ${what}, not a stream: the SDK's stream yields nothing and raises nothing`,
    attemptsSeen,
    textChars: 0,
  }
}

/**
 * Judges one response. `full`: a terminal event and the whole answer of one attempt;
 * `promoted`: the reasoning, written as the answer; `honest-error`: a non-2xx status, an
 * error event, or a failed connection; `silent-empty` / `silent-cut`: a 2xx that ended with no
 * answer / part of one and no error; `duplicate`: output of two attempts; `hang`: no end.
 */
export async function judgeObservation(
  observation: Observation,
  options: JudgeOptions,
): Promise<Judgement> {
  const base = { attemptsSeen: [] as number[], textChars: 0 }
  if (observation.status === null) {
    if (observation.end === 'timeout')
      return { ...base, kind: 'hang', reason: 'no response headers before the hang bound' }
    return {
      ...base,
      kind: 'honest-error',
      reason: `no response: ${short(observation.error ?? 'connection failed')}`,
    }
  }
  if (observation.status < 200 || observation.status > 299)
    return { ...base, kind: 'honest-error', reason: `HTTP ${observation.status} before any output` }
  const sse =
    (observation.contentType ?? '').includes('text/event-stream') ||
    /^(data|event|id|retry)?:/.test(decoder.decode(observation.body.subarray(0, 16)))
  if (!sse && observation.end !== 'timeout' && observation.end !== 'too-large')
    return judgeNonStream(observation, options.adapter)
  const read = await readSse(observation.body, options.adapter)
  const attemptsSeen = tagsOf(read.text + read.reasoning)
  const textChars = read.text.replace(tagPattern, '').length
  const got = { attemptsSeen, textChars }
  const seen = `${textChars} answer chars`
  if (attemptsSeen.length > 1)
    return {
      ...got,
      kind: 'duplicate',
      reason: `output of attempts ${attemptsSeen.join(' and ')} in one answer`,
    }
  const tag = attemptsSeen.length === 1 ? `[attempt ${attemptsSeen[0]}] ` : ''
  const answers = [options.answer, ...(options.otherAnswers ?? [])].map((answer) => tag + answer)
  if (answers.some((answer) => read.text.indexOf(answer) !== read.text.lastIndexOf(answer)))
    return { ...got, kind: 'duplicate', reason: 'the same answer twice' }
  if (observation.end === 'timeout')
    return { ...got, kind: 'hang', reason: `no end before the hang bound (${seen} so far)` }
  if (observation.end === 'too-large')
    return {
      ...got,
      kind: 'hang',
      reason: `no end: ${short(observation.error ?? 'the body grew without bound', 80)} (${seen} so far)`,
    }
  if (observation.end === 'error')
    return {
      ...got,
      kind: 'honest-error',
      reason: `the connection failed after ${seen}: ${short(observation.error ?? '', 40)}`,
    }
  if (read.errors > 0)
    return {
      ...got,
      kind: 'honest-error',
      reason: `an error event after ${seen}: ${short(read.firstError ?? '', 40)}`,
    }
  if (read.terminal && answers.includes(read.text))
    return { ...got, kind: 'full', reason: 'the whole answer and an end event' }
  if (read.terminal && tag !== '' && read.text === tag + options.reasoning)
    return { ...got, kind: 'promoted', reason: 'the reasoning, written as the answer' }
  if (textChars === 0) {
    const what =
      read.reasoning !== '' ? 'reasoning only' : read.terminal ? 'an end event only' : 'nothing'
    return {
      ...got,
      kind: 'silent-empty',
      reason: `${observation.status} stream with ${what}: no answer, no error`,
    }
  }
  const ending = read.terminal ? 'an end event' : 'no end event'
  return {
    ...got,
    kind: 'silent-cut',
    reason: `${seen} of ${options.answer.length}, ${ending}, no error`,
  }
}
