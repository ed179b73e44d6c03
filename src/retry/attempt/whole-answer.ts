/**
 * Judging a whole (non-streaming) answer before it goes to the client: the same rules a
 * stream's peek applies, on a body read in one piece. A 2xx that holds no output, an error
 * object, or no JSON at all is a failed attempt (retried like its streaming twin), never a
 * success passed on. Then what the client gets of it: translated by the host's
 * `translateResponse`, redacted by value, and what it reports of itself (usage, id, model).
 *
 * @module
 */

import { createStreamTracker } from '../../classify/index.js'
import { redactBytes } from '../../commit/encoder.js'
import { SecretBytes } from '../../commit/secret-bytes.js'
import {
  type ResponseTranslator,
  translateWholeAnswer,
  type WholeAnswer,
} from '../../commit/translator.js'
import { parseObject } from '../../protocols/common.js'
import { identityOf, type ResponseIdentity } from '../../protocols/identity.js'
import type { StreamAdapter, TokenUsage } from '../../protocols/types.js'
import { mergeUsage } from '../../protocols/usage.js'
import { FrameSplitter } from '../../sse/splitter.js'
import { classifyAttemptFailure, wholeAnswerVerdict } from '../decisions/classify.js'
import { errorFromBody } from '../decisions/error-body.js'
import type { FailureVerdict } from '../shared/verdict.js'

/** The most of a whole answer read before commit (a client's non-streaming request, the fallback). */
export const maxAnswerBytes = 32 * 1024 * 1024

/** Whether a response says its body is JSON (`application/json`, `application/…+json`). */
export function isJson(headers: Headers): boolean {
  return /^application\/(?:[\w.+-]+\+)?json\b/i.test(headers.get('content-type')?.trim() ?? '')
}

/** What rendered frames hold, as a stream's tracker sees them. */
function track(adapter: StreamAdapter, bytes: Uint8Array) {
  const splitter = new FrameSplitter(Math.max(1, bytes.length))
  splitter.push(bytes)
  const tracker = createStreamTracker(adapter)
  for (let frame = splitter.take(); frame !== null; frame = splitter.take()) tracker.observe(frame)
  return tracker.state
}

/**
 * Whether a whole answer is one a stream's peek would commit: visible output, or an end that
 * names its reason (a finish reason) with none before it. A renderer's bare end marker (Chat's
 * `[DONE]`, written for every message) is not the upstream's word, so it does not count.
 */
export function isAnswer(adapter: StreamAdapter, bytes: Uint8Array): boolean {
  const state = track(adapter, bytes)
  return state.errors === 0 && (state.firstVisibleIndex !== null || state.terminal?.reason != null)
}

/** Whether a JSON body states an error (`{ "error": {…} }`, in every shipped protocol's shape). */
export function statesError(message: Record<string, unknown>): boolean {
  return typeof message.error === 'object' && message.error !== null
}

/** The adapter's stream for a whole message, or `undefined` when it cannot render one (or threw). */
export function renderMessage(
  adapter: StreamAdapter,
  message: Record<string, unknown>,
): Uint8Array | undefined {
  try {
    return adapter.renderFromMessage?.(message)
  } catch {
    return undefined
  }
}

/**
 * Judges a 2xx whole answer: `failed` with what is wrong with it (a body that is not a JSON
 * object, such as an HTML page from a proxy; a JSON error served as success; a message with
 * neither output nor an end of its own, when the adapter can render it to tell: the twin of
 * a stream that ended empty), or `answer` with the message it parsed, which may go to the
 * client.
 */
export function judgeWholeAnswer(
  adapter: StreamAdapter,
  status: number,
  headers: Headers,
  bytes: Uint8Array,
):
  | { readonly kind: 'failed'; readonly verdict: FailureVerdict }
  | { readonly kind: 'answer'; readonly message: Record<string, unknown> } {
  const text = new TextDecoder().decode(bytes)
  const contentType = headers.get('content-type')
  const message = contentType === null || isJson(headers) ? parseObject(text) : undefined
  if (message === undefined || statesError(message)) {
    const verdict = classifyAttemptFailure({
      kind: 'not-sse',
      status,
      contentType,
      error: errorFromBody(text, status),
      headers,
    })
    return { kind: 'failed', verdict }
  }
  const answer = { kind: 'answer', message } as const
  if (adapter.renderFromMessage === undefined) return answer
  const rendered = renderMessage(adapter, message)
  // An adapter that cannot render this message cannot judge it either: it goes out as it came.
  if (rendered === undefined || isAnswer(adapter, rendered)) return answer
  return { kind: 'failed', verdict: wholeAnswerVerdict('empty') }
}

/** A whole answer's bytes with every secret redacted by value; the same bytes when none is in them. */
export function redactAnswer(bytes: Uint8Array, secrets: readonly string[]): Uint8Array {
  return new SecretBytes(secrets).in(bytes) ? redactBytes(bytes, secrets) : bytes
}

/** The whole answer the client gets: the upstream's, or what the host's translator made of it. */
export async function translatedAnswer(
  translate: ResponseTranslator | undefined,
  status: number,
  headers: Headers,
  bytes: Uint8Array,
): Promise<WholeAnswer> {
  const contentType = headers.get('content-type') ?? 'application/json'
  if (translate === undefined) return { bytes, contentType }
  return translateWholeAnswer(translate, status, { bytes, contentType }, maxAnswerBytes)
}

/**
 * What a whole JSON answer reports of itself: its usage (through the adapter's `usageOf`;
 * usage is only reported, so an adapter that throws or answers garbage leaves it out) and
 * its id and model.
 */
export function wholeReport(
  adapter: StreamAdapter,
  message: Record<string, unknown>,
): { usage: TokenUsage | undefined; response: ResponseIdentity | undefined } {
  let usage: TokenUsage | undefined
  try {
    usage = mergeUsage(undefined, adapter.usageOf?.(message))
  } catch {
    usage = undefined
  }
  return { usage, response: identityOf(message) }
}
