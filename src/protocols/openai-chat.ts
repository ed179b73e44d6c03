/**
 * OpenAI Chat Completions streaming (`POST /v1/chat/completions` with `stream: true`), and
 * the many OpenAI-compatible providers that speak it (reasoning as `reasoning_content` or
 * `reasoning`, errors as a data frame holding an `error` object).
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'
import { endsWithObject, findNeedles, needle, needleSet, startsWith } from './bytes.js'
import {
  carriesContent,
  encode,
  field,
  inspectWithoutData,
  malformedFrame,
  mapReason,
  noLineBreakFrom,
  parseData,
  renderable,
  sseFrameText,
  stringField,
  textField,
  unknownOutput,
  upstreamError,
} from './common.js'
import { chatWithOptions, type OpenAIChatOptions } from './openai-chat-continuation.js'
import {
  bearerCredential,
  fitTopLevelBudget,
  modelNamedInBody,
  pathEndsWith,
  streamFlagInBody,
} from './request.js'
import type {
  ErrorVerdict,
  FrameVerdict,
  OutputVerdict,
  RenderableError,
  RenderState,
  StreamAdapter,
  TerminalInfo,
  TerminalReason,
  UpstreamRequest,
} from './types.js'
import { chatUsageOf, withUsage } from './usage.js'

const dataObject = needle('data: {')

const quickKeys = needleSet('r', '"finish_reason":null', '"error"')

const reasons: Readonly<Record<string, TerminalReason>> = {
  stop: 'stop',
  length: 'length',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'content_filter',
  error: 'error',
}

/**
 * The error of a data frame whose `error` is truthy but no object (`"upstream failed"`,
 * `true`): the `openai` SDK raises an `APIError` on any truthy `error` (`if (data &&
 * data.error)`), in Chat and Responses alike, so it is an error frame whatever its shape.
 */
export function openaiScalarError(value: unknown): ErrorVerdict {
  const message = typeof value === 'string' ? value : JSON.stringify(value)
  return { kind: 'error', error: upstreamError('upstream_error', message) }
}

function chatError(body: Record<string, unknown>): ErrorVerdict | undefined {
  const error = body.error
  if (!error) return undefined
  if (typeof error !== 'object') return openaiScalarError(error)
  const code = field(error, 'code')
  const codeText = typeof code === 'string' ? code : null
  const status = typeof code === 'number' ? code : null
  const type = stringField(error, 'type') ?? codeText ?? 'upstream_error'
  return {
    kind: 'error',
    error: upstreamError(type, stringField(error, 'message'), codeText, status),
  }
}

function hasToolData(calls: unknown): string | undefined {
  if (!Array.isArray(calls)) return undefined
  for (const call of calls) {
    const fn = field(call, 'function')
    const data = textField(fn, 'name') ?? textField(fn, 'arguments')
    if (data !== undefined) return data
  }
  return undefined
}

/** Delta members whose meaning the adapter knows; any other with content is output. */
const knownDeltaMembers = new Set([
  'role',
  'content',
  'tool_calls',
  'function_call',
  'refusal',
  'reasoning_content',
  'reasoning',
  'reasoning_details',
  // gpt-oss on Groq labels each delta with its harmony channel (`analysis`, `final`): a label
  // of the content beside it, never shown itself.
  'channel',
])
/** Members of unknown content that are never shown: ids, indexes, types. */
const notContent: ReadonlySet<string> = new Set(['type', 'id', 'index', 'format'])

/** What one choice's delta carries, each kind's first text. */
interface DeltaFinds {
  text?: string | undefined
  tool?: string | undefined
  refusal?: string | undefined
  reasoning?: string | undefined
  unknown?: true
}

/** The text of a Mistral `thinking` part: a string, or text parts. */
function thinkingText(thinking: unknown): string {
  if (typeof thinking === 'string') return thinking
  if (!Array.isArray(thinking)) return ''
  let out = ''
  for (const part of thinking) out += stringField(part, 'text') ?? ''
  return out
}

/**
 * `delta.content` as an array of typed parts (Mistral's reasoning models, for the answer as
 * well as the thinking): `text` parts are text, `thinking` parts reasoning, and a part of any
 * other type with content is output.
 */
function readContentParts(parts: unknown[], finds: DeltaFinds): void {
  let text = ''
  let reasoning = ''
  for (const part of parts) {
    const type = stringField(part, 'type')
    if (type === 'text') text += stringField(part, 'text') ?? ''
    else if (type === 'thinking') reasoning += thinkingText(field(part, 'thinking'))
    else if (carriesContent(part, notContent)) finds.unknown = true
  }
  if (text !== '') finds.text ??= text
  if (reasoning !== '') finds.reasoning ??= reasoning
}

function readDelta(delta: unknown, finds: DeltaFinds): void {
  const content = field(delta, 'content')
  if (typeof content === 'string' && content !== '') finds.text ??= content
  else if (Array.isArray(content)) readContentParts(content, finds)
  finds.tool ??=
    hasToolData(field(delta, 'tool_calls')) ?? textField(field(delta, 'function_call'), 'arguments')
  finds.refusal ??= textField(delta, 'refusal')
  finds.reasoning ??= textField(delta, 'reasoning_content') ?? textField(delta, 'reasoning')
  if (
    finds.reasoning === undefined &&
    carriesContent(field(delta, 'reasoning_details'), notContent)
  )
    finds.reasoning = ''
  if (typeof delta !== 'object' || delta === null) return
  for (const [key, member] of Object.entries(delta)) {
    if (!knownDeltaMembers.has(key) && carriesContent(member, notContent)) finds.unknown = true
  }
}

/** The output a choice's deltas carry: text first, then tool, refusal, unknown, reasoning. */
function outputOf(finds: DeltaFinds): Omit<OutputVerdict, 'terminal'> | undefined {
  if (finds.text !== undefined) return { kind: 'text', text: finds.text }
  if (finds.tool !== undefined) return { kind: 'tool', text: finds.tool }
  if (finds.refusal !== undefined) return { kind: 'refusal', text: finds.refusal }
  if (finds.unknown === true) return unknownOutput
  if (finds.reasoning !== undefined) return { kind: 'reasoning', text: finds.reasoning }
  return undefined
}

function inspectChunk(body: Record<string, unknown>): FrameVerdict {
  const error = chatError(body)
  if (error !== undefined) return error
  const choices = body.choices
  if (!Array.isArray(choices) || choices.length === 0) return { kind: 'meta' }
  let terminal: TerminalInfo | undefined
  const finds: DeltaFinds = {}
  for (const choice of choices) {
    const finish = field(choice, 'finish_reason')
    if (typeof finish === 'string' && terminal === undefined) {
      terminal = { reason: mapReason(reasons, finish), raw: finish }
    }
    const delta = field(choice, 'delta')
    if (delta !== undefined && delta !== null) readDelta(delta, finds)
  }
  const output = outputOf(finds)
  if (output !== undefined) return terminal === undefined ? output : { ...output, terminal }
  return terminal === undefined ? { kind: 'meta' } : { kind: 'terminal', terminal }
}

/**
 * Where every `openai` SDK stops reading a stream cleanly: data that is exactly `[DONE]`. The
 * 6.x SDK stops at any data starting with `[DONE]`, the 7.x SDK only at `[DONE]` itself and
 * raises on `[DONE]x` (it is no JSON): such a frame is no clean end, so no SDK may be shown one.
 */
export function endsAtDone(frame: SseFrame): boolean {
  return frame.data === '[DONE]'
}

/**
 * The verdict of a frame the `openai` SDK reads as an event but that has no JSON data: the
 * SDK raises on it (a `SyntaxError`, or its `APIError` for `event: error`), in Chat and
 * Responses alike, so it is an error, never bookkeeping: an event without data (`event:
 * ping` alone: both 6.x and 7.x parse its empty data and raise) and data starting `[DONE]`
 * that is not `[DONE]` itself (7.x raises). `undefined` for every other frame.
 */
export function openaiUnreadable(frame: SseFrame): ErrorVerdict | undefined {
  const data = frame.data
  if (data === undefined) {
    if (frame.event === undefined) return undefined
    if (frame.event === 'error')
      return { kind: 'error', error: upstreamError('upstream_error', 'upstream error event') }
    return malformedFrame(`an event without data, which the openai SDK raises on: ${frame.event}`)
  }
  if (data.startsWith('[DONE]') && data !== '[DONE]')
    return malformedFrame(
      `an end marker that is not [DONE], which the openai SDK raises on: ${data}`,
    )
  return undefined
}

/**
 * The error of a named `event: error` whose data is a JSON object: the 7.x `openai` SDK raises
 * its `APIError` on it whatever the data holds (`data.error ?? data`), nested or flat
 * (`{"message":…,"code":…,"type":…}`), so it is an error, not bookkeeping.
 */
function openaiErrorEvent(body: Record<string, unknown>): ErrorVerdict {
  const error = typeof body.error === 'object' && body.error !== null ? body.error : body
  if (error !== body && typeof error !== 'object') return openaiScalarError(error)
  const code = field(error, 'code')
  const codeText = typeof code === 'string' ? code : null
  const status = typeof code === 'number' ? code : null
  const type = stringField(error, 'type') ?? codeText ?? 'upstream_error'
  const message = stringField(error, 'message') ?? 'upstream error event'
  return { kind: 'error', error: upstreamError(type, message, codeText, status) }
}

/** The same body with streaming off (and its stream-only options dropped). */
export function withoutStreaming(request: UpstreamRequest): UpstreamRequest {
  const { stream_options: _dropped, ...body } = request.body
  return { url: request.url, body: { ...body, stream: false } }
}

function chatFromMessage(message: unknown): Uint8Array {
  const created = field(message, 'created')
  const envelope = {
    id: stringField(message, 'id') ?? 'chatcmpl-stream-boundary',
    object: 'chat.completion.chunk',
    created: typeof created === 'number' ? created : Math.floor(Date.now() / 1000),
    model: stringField(message, 'model') ?? 'unknown',
  }
  const frame = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    sseFrameText(JSON.stringify({ ...envelope, choices, ...extra }))
  const delta = (index: number, body: Record<string, unknown>, finish: unknown = null) =>
    frame([{ index, delta: body, logprobs: null, finish_reason: finish }])
  const choices = field(message, 'choices')
  let out = ''
  for (const [position, choice] of (Array.isArray(choices) ? choices : []).entries()) {
    const indexField = field(choice, 'index')
    const index = typeof indexField === 'number' ? indexField : position
    const answer = field(choice, 'message')
    out += delta(index, { role: 'assistant', content: '' })
    for (const key of ['reasoning_content', 'reasoning']) {
      const text = textField(answer, key)
      if (text !== undefined) out += delta(index, { [key]: text })
    }
    const content = textField(answer, 'content')
    if (content !== undefined) out += delta(index, { content })
    const refusal = textField(answer, 'refusal')
    if (refusal !== undefined) out += delta(index, { refusal })
    const calls = field(answer, 'tool_calls')
    for (const [slot, call] of (Array.isArray(calls) ? calls : []).entries()) {
      out += delta(index, {
        tool_calls: [
          {
            index: slot,
            id: field(call, 'id'),
            type: 'function',
            function: field(call, 'function'),
          },
        ],
      })
    }
    out += delta(index, {}, field(choice, 'finish_reason') ?? 'stop')
  }
  const usage = field(message, 'usage')
  if (usage !== undefined) out += frame([], { usage })
  return encode(`${out}${sseFrameText('[DONE]')}`)
}

/** The OpenAI error object, as both Chat and Responses return it on a non-2xx status. */
export function openaiErrorBody(error: RenderableError): string {
  const { type, message, code } = renderable(error)
  return JSON.stringify({ error: { message, type, param: null, code } })
}

function envelope(state: RenderState | undefined): { id: string; created: number; model: string } {
  const first = state?.firstData === undefined ? undefined : parseData(state.firstData)
  const created = first?.created
  return {
    id: stringField(first, 'id') ?? 'chatcmpl-stream-boundary',
    created: typeof created === 'number' ? created : Math.floor(Date.now() / 1000),
    model: stringField(first, 'model') ?? 'unknown',
  }
}

function chunk(
  state: RenderState | undefined,
  delta: Record<string, unknown>,
  finish: string | null,
): string {
  const { id, created, model } = envelope(state)
  return sseFrameText(
    JSON.stringify({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    }),
  )
}

/**
 * The OpenAI Chat Completions adapter.
 *
 * - `[DONE]` and a chunk with a `finish_reason` are terminal; a chunk carrying content and a
 *   `finish_reason` is both text and terminal. `[DONE]` is also where the SDK stops reading
 *   (`clientEndsAt`): the relay writes nothing after it.
 * - `delta.reasoning_content` (DeepSeek style) and `delta.reasoning` (OpenRouter style) are
 *   reasoning; `delta.refusal` is a refusal; tool calls with a name or argument data are tool output.
 * - `delta.content` as typed parts (Mistral): `text` parts are text, `thinking` parts reasoning.
 *   Any other part, or delta member, with content is output (guarantee 27): only what is known
 *   to show nothing (a role, empty content, usage) is `meta`.
 * - A named `event: error` (nested or flat body), an event without data and `[DONE]x` are
 *   errors: the 7.x SDK raises on each (6.x on the second), and only exactly `[DONE]` ends.
 * - A data frame whose `error` is truthy is an error (the SDK raises on it), even with
 *   `finish_reason: "error"`: an `error` object, or a string or `true` as some servers send.
 *
 * Rendered error: a chunk holding only an `error` object, with no `[DONE]` after it (the
 * official SDK raises it as an `APIError`). Rendered stop: a `finish_reason` chunk, then `[DONE]`.
 *
 * @group Protocols
 */
export const openaiChat: StreamAdapter = Object.freeze({
  name: 'openai-chat',
  inspect(frame: SseFrame): FrameVerdict {
    const data = frame.data
    // Cheap check before JSON.parse: the end marker.
    if (data === '[DONE]') return { kind: 'terminal', terminal: { reason: null, raw: '[DONE]' } }
    const unreadable = openaiUnreadable(frame)
    if (unreadable !== undefined) return unreadable
    if (data === undefined) return inspectWithoutData(frame, chatError)
    const body = parseData(data)
    if (body === undefined)
      return malformedFrame(`a Chat Completions data frame is not a JSON object: ${data}`)
    if (frame.event === 'error') return chatError(body) ?? openaiErrorEvent(body)
    return withUsage(inspectChunk(body), chatUsageOf(body))
  },
  quickOutput(frame: SseFrame): boolean {
    // A chunk whose finish_reason is null and that holds no error neither ends nor fails; one
    // line only, so no `event: error` beside it makes it an error.
    const raw = frame.raw
    return (
      startsWith(raw, dataObject) &&
      endsWithObject(raw) &&
      noLineBreakFrom(raw, 0) &&
      findNeedles(raw, quickKeys) === 1
    )
  },
  clientEndsAt: endsAtDone,
  renderError(error: RenderableError): Uint8Array {
    return encode(sseFrameText(openaiErrorBody(error)))
  },
  renderErrorBody: openaiErrorBody,
  nonStreamingRequest: withoutStreaming,
  credentialHeader: bearerCredential,
  invalidRequest: modelNamedInBody,
  matchesUrl: pathEndsWith('/chat/completions'),
  isStreamingRequest: streamFlagInBody,
  fitOutputBudget: fitTopLevelBudget(['max_completion_tokens', 'max_tokens']),
  renderFromMessage: chatFromMessage,
  usageOf: chatUsageOf,
  renderStop(state: RenderState): Uint8Array {
    const finish = state.counts.tool > 0 && state.counts.text === 0 ? 'tool_calls' : 'stop'
    return encode(`${chunk(state, {}, finish)}${sseFrameText('[DONE]')}`)
  },
  renderReasoningAsText(state: RenderState): Uint8Array {
    return encode(chunk(state, { role: 'assistant', content: state.reasoningText }, null))
  },
})

/**
 * The OpenAI Chat adapter with per-upstream options: `continuation` names an
 * OpenAI-compatible server's dialect for continuing a cut answer (DeepSeek's and Mistral's
 * `prefix: true`, vLLM's `continue_final_message`), which the relay's `continueAfterCut`
 * needs. Everything else is {@link openaiChat}'s; without a dialect it is `openaiChat` itself.
 *
 * @example
 * const adapter = openaiChatWith({ continuation: 'vllm-continue' })
 * relay({ adapter, policy: { continueAfterCut: true }, ... })
 *
 * @group Protocols
 */
export function openaiChatWith(options: OpenAIChatOptions): StreamAdapter {
  return chatWithOptions(openaiChat, options)
}
