/**
 * One upstream attempt: send it within its clocks, judge the response, peek, and (on output)
 * commit and pump; its key lease reported exactly once.
 *
 * @module
 */

import { now, settleWithin } from '../../call-safely.js'
import { deliverOn } from '../../commit/deliver.js'
import type { PumpEnd, StallStats } from '../../commit/pump-policy.js'
import type { StreamTimeoutError } from '../../errors.js'
import type { KeyLease, KeyOutcome } from '../../key-pool/types.js'
import { FirstOutputClock } from '../../peek/clock.js'
import { parseObject } from '../../protocols/common.js'
import { identityOfData } from '../../protocols/identity.js'
import { type FrameSource, frameSourceOf } from '../../sse/sources.js'
import { Stop } from '../../stop.js'
import {
  classifyAttemptFailure,
  peekTimeoutVerdict,
  wholeAnswerVerdict,
} from '../decisions/classify.js'
import { declaresMoreThan, errorFromBody, readBounded, readWhole } from '../decisions/error-body.js'
import { withHeadroom } from '../decisions/headroom.js'
import type { AttemptInput, AttemptResult } from '../shared/attempt-io.js'
import type { AttemptMode, UpstreamHttpError } from '../shared/attempt-types.js'
import { neverAborted } from '../shared/hooks.js'
import type { AttemptFailure, FailureVerdict } from '../shared/verdict.js'
import { callAttemptFunction, leasedKeyOf } from './call-attempt.js'
import { statusFailure } from './status-failure.js'
import {
  isAnswer,
  isJson,
  judgeWholeAnswer,
  maxAnswerBytes,
  redactAnswer,
  renderMessage,
  statesError,
  translatedAnswer,
  wholeReport,
} from './whole-answer.js'

function isEventStream(headers: Headers): boolean {
  const type = headers.get('content-type')
  // A missing content type is read as SSE: the peek then tells malformed bodies apart.
  return type === null || /^text\/event-stream\b/i.test(type.trim())
}

/** A content type that says `text/event-stream` (a missing one says nothing). */
function statesEventStream(headers: Headers): boolean {
  return /^text\/event-stream\b/i.test(headers.get('content-type')?.trim() ?? '')
}

function bodyOf(bytes: Uint8Array): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(bytes)
      controller.close()
    },
  })
}

function failed(
  verdict: FailureVerdict,
  status: number | null,
  stopped?: 'client-gone' | 'deadline' | 'hedge-lost',
  upstream?: UpstreamHttpError,
): AttemptResult {
  return { kind: 'failed', verdict, status, stopped, upstream }
}

/** Watches one attempt: the request's stop and deadline signals and the attempt's own clock. */
class AttemptSignals {
  /**
   * Aborts the attempt. The library listens to it as it is; the attempt function and the
   * body reads get its real `AbortSignal` (`stop.real`).
   */
  readonly stop = new Stop()
  /** The upstream response's headers, once it answered: the key's headroom is read from them. */
  headers: Headers | undefined
  readonly #input: AttemptInput
  #clock: FirstOutputClock | undefined
  readonly #onStop = () => this.stop.abort(this.#input.stop.reason)
  readonly #onDeadline = () => this.stop.abort(this.#input.deadline.reason)
  readonly #onLost = () => this.stop.abort(this.#input.lost?.reason)
  #timedOut: StreamTimeoutError | undefined

  constructor(input: AttemptInput) {
    this.#input = input
    for (const [signal, listener] of [
      [input.stop, this.#onStop],
      [input.deadline, this.#onDeadline],
      [input.lost, this.#onLost],
    ] as const) {
      if (signal === undefined || signal === neverAborted) continue
      if (signal.aborted) listener()
      else signal.addEventListener('abort', listener, { once: true })
    }
  }

  /**
   * Aborts the attempt with a timeout at the first-byte or the first-output bound, whichever
   * falls due (one request-scoped, referenced timer for both). The error is made when it
   * fires: most attempts never need its stack trace.
   */
  startClock(startedAt: number, firstByteMs: number, firstOutputMs: number): FirstOutputClock {
    this.#clock = new FirstOutputClock(startedAt, firstByteMs, firstOutputMs, (error) => {
      this.#timedOut = error
      this.stop.abort(error)
    })
    return this.#clock
  }

  /** Why the attempt was stopped, if it was. */
  stoppedBy(): 'client-gone' | 'deadline' | 'hedge-lost' | StreamTimeoutError | undefined {
    if (this.#input.stop.aborted) return 'client-gone'
    if (this.#input.deadline.aborted) return 'deadline'
    if (this.#input.lost?.aborted) return 'hedge-lost'
    return this.#timedOut
  }

  /** After commit, the deadline no longer applies. */
  detachDeadline(): void {
    this.#input.deadline.removeEventListener('abort', this.#onDeadline)
  }

  dispose(): void {
    this.#clock?.dispose()
    this.#input.stop.removeEventListener('abort', this.#onStop)
    this.#input.lost?.removeEventListener('abort', this.#onLost)
    this.detachDeadline()
  }
}

const clientGone: FailureVerdict = {
  retryable: false,
  key: { kind: 'client-gone' },
  reason: 'client-gone',
  overload: false,
  status: 499,
  error: { type: 'client_closed', message: 'the client went away' },
}

/** A hedged attempt cancelled because another one reached the client first. */
const hedgeLost: FailureVerdict = {
  retryable: false,
  key: { kind: 'cancelled' },
  reason: 'hedge-lost',
  overload: false,
  status: 499,
  error: { type: 'cancelled', message: 'another attempt of the request answered first' },
}

function timeoutVerdict(error: StreamTimeoutError, mode: AttemptMode) {
  if (mode === 'non-streaming') {
    return {
      retryable: false,
      key: { kind: 'protocol-fault' },
      reason: 'fallback-timeout',
      overload: false,
      status: 504,
      error: {
        type: 'timeout',
        message: `the non-streaming fallback got no answer within ${error.timeoutMs} ms`,
      },
    } satisfies FailureVerdict
  }
  const kind = error.timeout === 'first-byte' ? 'first-byte-timeout' : 'first-output-timeout'
  return peekTimeoutVerdict(kind, error.timeoutMs)
}

function invalidResultVerdict(value: unknown): FailureVerdict {
  const got = value === null ? 'null' : typeof value
  return {
    retryable: false,
    key: { kind: 'cancelled' },
    reason: 'invalid-attempt-result',
    overload: false,
    status: 502,
    error: {
      type: 'upstream_error',
      message: `the attempt function resolved to ${got}, not a Response`,
    },
  }
}

function streamingUnsupported(status: number): FailureVerdict {
  return {
    retryable: false,
    key: { kind: 'rejected' },
    reason: 'streaming-unsupported',
    overload: false,
    status: 502,
    error: {
      type: 'upstream_error',
      message: `the upstream refused the streaming request (${status})`,
    },
  }
}

/**
 * What a committed attempt tells its key, by how its stream ended: every end the upstream
 * reached (cleanly or not) says the key works; an end the client or the host caused says
 * nothing of it. Exhaustive: a new end kind does not compile until it is named here. The
 * continuation of a cut stream reports its lease by it too.
 */
export function keyOutcomeOf(end: PumpEnd): KeyOutcome {
  switch (end.kind) {
    case 'completed':
    case 'upstream-error':
    case 'stop-synthesized':
    case 'reasoning-promoted':
    case 'error-written':
      return { kind: 'success' }
    case 'client-gone':
    case 'downstream-stalled':
    case 'aborted':
      return { kind: 'client-gone' }
  }
}

/**
 * Runs one attempt and reports its lease exactly once, whatever happens: the verdict's key
 * outcome on failure, `success` (after `commit()` at the first output) or `client-gone` for
 * a committed stream, `cancelled` when anything threw.
 */
export async function runAttempt(input: AttemptInput): Promise<AttemptResult> {
  let outcome: KeyOutcome = { kind: 'cancelled' }
  const signals = new AttemptSignals(input)
  try {
    const result = await attemptOnce(input, signals)
    outcome = withHeadroom(
      result.kind === 'failed' ? result.verdict.key : keyOutcomeOf(result.end),
      signals.headers,
    )
    // No `await` of nothing: each one costs promises (and async hooks) per request.
    const { continuation } = input
    if (continuation !== undefined)
      await continuation.close(result.kind === 'committed' ? result.end : undefined)
    return result
  } finally {
    signals.dispose()
    input.onEnd?.()
    const { continuation, lease } = input
    if (lease !== undefined) {
      try {
        await lease.report(outcome)
      } catch {
        // A pool that fails its report does not end the request.
      }
    }
    // A throw: the continuation's lease (if one runs) ends too; a second close does nothing.
    if (continuation !== undefined) await continuation.close(undefined)
  }
}

/** The context the attempt function is given (the adapter is added by `callAttemptFunction`). */
function attemptContext(input: AttemptInput, signals: AttemptSignals) {
  return {
    key: leasedKeyOf(input.lease),
    signal: signals.stop.real,
    attemptNumber: input.attemptNumber,
    route: input.routeName,
    request: input.request,
    requestId: input.requestId,
    freshConnection: input.freshConnection,
  }
}

/** Releases the body of what an attempt function returned instead of a `Response` (user code, bounded). */
async function releaseBody(value: unknown): Promise<void> {
  try {
    await settleWithin((value as { body?: ReadableStream | null } | null)?.body?.cancel?.())
  } catch {
    // A getter or a `cancel` that throws: nothing more to release.
  }
}

/**
 * The clocks that run from the moment an attempt is sent. A stream: the first-byte bound and
 * the first-output bound, so the one timeout a user sets bounds connecting and the response
 * headers too (the peek takes both over with what is left of them). A whole answer: the
 * first-output bound over connect, headers and body (its output is the whole answer; its
 * headers come when it is ready, so no first-byte bound applies). The fallback: its own.
 */
function startSendClock(
  input: AttemptInput,
  signals: AttemptSignals,
  started: number,
): FirstOutputClock {
  const { firstByteTimeoutMs = Number.POSITIVE_INFINITY, firstOutputTimeoutMs } = input.policy.peek
  const output = firstOutputTimeoutMs ?? Number.POSITIVE_INFINITY
  const never = Number.POSITIVE_INFINITY
  if (input.mode === 'non-streaming') {
    const fallback = input.policy.fallbackTimeoutMs ?? never
    return signals.startClock(started, never, Math.min(fallback, input.budgetMs))
  }
  if (input.mode === 'whole') return signals.startClock(started, never, output)
  return signals.startClock(started, firstByteTimeoutMs, output)
}

/** The failure of an attempt whose body read was cut because the request or a timer stopped it. */
function stoppedFailure(
  signals: AttemptSignals,
  mode: AttemptMode,
  status: number | null,
): AttemptResult | undefined {
  const stopped = signals.stoppedBy()
  if (stopped === undefined) return undefined
  if (stopped === 'client-gone' || stopped === 'deadline')
    return failed(clientGone, status, stopped)
  if (stopped === 'hedge-lost') return failed(hedgeLost, status, stopped)
  return failed(timeoutVerdict(stopped, mode), status)
}

/** Reads a non-stream answer: an error, or a whole message rendered as the protocol's stream. */
async function readWholeAnswer(
  input: AttemptInput,
  response: Response,
  signal: AbortSignal,
): Promise<{ body: ReadableStream<Uint8Array> } | { failure: AttemptResult }> {
  const { status } = response
  const adapter = input.route.adapter
  const asMessage = input.mode === 'non-streaming' || isJson(response.headers)
  const limit = asMessage ? maxAnswerBytes : input.policy.maxErrorBodyBytes
  // A message declared past the bound could not be parsed whole: refused from its header.
  if (asMessage && declaresMoreThan(response.headers.get('content-length'), limit)) {
    await settleWithin(response.body?.cancel())
    return { failure: failed(wholeAnswerVerdict('too-large', limit), status) }
  }
  const text = await readBounded(response.body, limit, signal)
  const message = asMessage ? parseObject(text) : undefined
  const rendered = message === undefined ? undefined : renderMessage(adapter, message)
  // An upstream that ignored `stream: true` sent the answer itself: serve it as the stream,
  // judged as a whole answer is (output, or an end that names its reason).
  const answered =
    message !== undefined &&
    !statesError(message) &&
    rendered !== undefined &&
    isAnswer(adapter, rendered)
  if (answered) return { body: bodyOf(rendered) }
  const failure: AttemptFailure = {
    kind: 'not-sse',
    status,
    contentType: response.headers.get('content-type'),
    error: errorFromBody(text, status),
    headers: response.headers,
  }
  return { failure: failed(classifyAttemptFailure(failure), status) }
}

async function attemptOnce(input: AttemptInput, signals: AttemptSignals): Promise<AttemptResult> {
  input.gate.assertCanRetry()
  const started = now()
  // Sent within the first-byte bound, in this function (each `async` step costs promises).
  const clock = startSendClock(input, signals, started)
  let response: unknown
  try {
    response = await callAttemptFunction(input.route, attemptContext(input, signals), signals.stop)
  } catch (error) {
    return (
      stoppedFailure(signals, input.mode, null) ??
      failed(classifyAttemptFailure({ kind: 'connection', error }), null)
    )
  }
  if (!(response instanceof Response)) {
    await releaseBody(response)
    return failed(invalidResultVerdict(response), null)
  }
  signals.headers = response.headers
  const result = await attemptAnswer(input, signals, { response, clock }, started)
  // Whatever went wrong after the upstream answered, its request ids name the attempt.
  return result.kind === 'failed' ? { ...result, headers: response.headers } : result
}

/** What became of an attempt the upstream answered: its status, then its body. */
async function attemptAnswer(
  input: AttemptInput,
  signals: AttemptSignals,
  sent: { response: Response; clock: FirstOutputClock },
  started: number,
): Promise<AttemptResult> {
  const { gate, policy, mode } = input
  const { response } = sent
  const { status } = response
  // The send clocks (first byte and first output, or the fallback's) stay armed while an error body is read.
  const fallbackWanted = policy.fallbackTimeoutMs !== undefined && input.request !== undefined
  if ((status === 404 || status === 405) && mode === 'stream' && fallbackWanted) {
    await readBounded(response.body, 0, signals.stop.real)
    return failed(streamingUnsupported(status), status)
  }
  if (status < 200 || status > 299) {
    const text = await readBounded(response.body, policy.maxErrorBodyBytes, signals.stop.real)
    const { verdict, upstream } = statusFailure(input, status, response.headers, text)
    return failed(verdict, status, undefined, upstream)
  }
  // A whole request that did not say it is one: its answer decides (an event stream streams).
  const streamed =
    mode === 'whole' && input.streamsOnEventStream === true && statesEventStream(response.headers)
  if (mode === 'whole' && !streamed)
    return answerWhole(input, signals, response, () => sent.clock.dispose())
  let body: FrameSource
  const source = frameSourceOf(response)
  if (mode !== 'non-streaming' && source !== null && isEventStream(response.headers)) {
    body = source
  } else {
    const whole = await readWholeAnswer(input, response, signals.stop.real)
    if ('failure' in whole) return stoppedFailure(signals, mode, status) ?? whole.failure
    body = whole.body
  }
  // The attempt's clock goes on in the peek, with what is left of its bounds.
  // Early headers go out before the peek; otherwise the headers are the winner's, at commit.
  if (gate.earlyHeaders) gate.setUpstreamHeaders(response.headers, input.secrets)
  let beaten = false
  const delivered = await deliverOn({
    gate,
    body,
    adapter: input.route.adapter,
    // Both peek bounds run from the moment the attempt was sent: connect and headers count.
    peek: { ...policy.peek, clockStartedAt: started },
    clock: sent.clock,
    maxFrameBytes: policy.maxFrameBytes,
    pump: policy.pump,
    downstream: policy.downstream,
    signal: input.stop,
    peekSignal: signals.stop,
    ...(input.secrets === undefined ? {} : { secrets: input.secrets }),
    continuation: input.continuation,
    claim: () => {
      beaten = input.claim?.() === false
      if (beaten) return false
      gate.setUpstreamHeaders(response.headers, input.secrets)
      return true
    },
    onCommit: () => {
      signals.detachDeadline()
      commitLease(input.lease)
      input.onCommit()
    },
  })
  const usage = delivered.peek.tracker.state.usage ?? undefined
  if (delivered.kind === 'not-committed') {
    const stopped = signals.stoppedBy()
    const reported = (result: AttemptResult): AttemptResult =>
      usage === undefined ? result : { ...result, usage }
    // The deadline's abort reason is a timeout error: the peek may name it a timeout of its own.
    if (stopped === 'client-gone' || stopped === 'deadline') {
      return reported(failed(clientGone, status, stopped))
    }
    if (stopped === 'hedge-lost' || beaten) return reported(failed(hedgeLost, status, 'hedge-lost'))
    return reported(
      failed(classifyAttemptFailure({ kind: 'peek', outcome: delivered.peek }), status),
    )
  }
  const pumped = delivered.pump
  const continued = input.continuation?.records
  return {
    kind: 'committed',
    status,
    end: pumped.end,
    eof: pumped.eof,
    bytes: pumped.bytes,
    stalls: pumped.stalls,
    // The attempt's record keeps its own upstream's usage; the answer's adds continuations'.
    usage: input.continuation === undefined ? usage : input.continuation.attemptUsage(usage),
    answerUsage: input.continuation?.usage(usage),
    response: identityOfData(delivered.peek.tracker.state.firstData),
    ...(continued === undefined || continued.length === 0 ? {} : { continuations: continued }),
  }
}

const noStalls = (thresholdMs: number): StallStats =>
  Object.freeze({ count: 0, totalMs: 0, longestMs: 0, thresholdMs })

/**
 * A client's non-streaming request: the whole 2xx answer is read (bounded, within the
 * first-output bound that has run since the send), judged like a stream's first output, and
 * only then committed and sent as it came (status, JSON body, allowlisted headers). A body
 * cut while read, a JSON error served as success or an answer without output is a failed
 * attempt, retried like its streaming twin.
 */
async function answerWhole(
  input: AttemptInput,
  signals: AttemptSignals,
  response: Response,
  clearClocks: () => void,
): Promise<AttemptResult> {
  const { status } = response
  const declared = response.headers.get('content-length')
  const read = await readWhole(response.body, maxAnswerBytes, signals.stop.real, declared)
  clearClocks()
  // A read the request's clocks or the client stopped ended early: what it holds is no answer.
  const stoppedEarly = stoppedFailure(signals, 'whole', status)
  if (stoppedEarly !== undefined) return stoppedEarly
  if (read.kind !== 'read') {
    return failed(
      wholeAnswerVerdict(read.kind === 'failed' ? 'read-error' : 'too-large', maxAnswerBytes),
      status,
    )
  }
  const judged = judgeWholeAnswer(input.route.adapter, status, response.headers, read.bytes)
  if (judged.kind === 'failed') return failed(judged.verdict, status)
  // A gateway's `Response → Response` translator is given the whole answer too.
  const answer = await translatedAnswer(
    input.policy.downstream.translateResponse,
    status,
    response.headers,
    read.bytes,
  )
  const stopped = stoppedFailure(signals, 'whole', status)
  if (stopped !== undefined) return stopped
  signals.detachDeadline()
  commitLease(input.lease)
  input.onCommit()
  const { gate } = input
  gate.setUpstreamHeaders(response.headers, input.secrets)
  let end: PumpEnd = { kind: 'completed' }
  try {
    await gate.answer(
      status,
      // An answer may quote the key it was asked with (in its id): redacted by value.
      input.secrets === undefined ? answer.bytes : redactAnswer(answer.bytes, input.secrets),
      answer.contentType,
    )
  } catch (error) {
    if (gate.failure === undefined) throw error
    end = { kind: 'client-gone', error: gate.failure }
  }
  return {
    kind: 'committed',
    status,
    end,
    eof: null,
    bytes: answer.bytes.length,
    stalls: noStalls(input.policy.pump.stallThresholdMs),
    ...wholeReport(input.route.adapter, judged.message),
  }
}

/** Tells the pool the key works; a pool that throws here does not end the request. */
function commitLease(lease: KeyLease | undefined): void {
  try {
    lease?.commit()
  } catch {
    // The lease is still reported once, when the attempt ends.
  }
}
