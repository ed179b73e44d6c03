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
  encode,
  field,
  inspectWithoutData,
  malformedFrame,
  mapReason,
  parseData,
  renderable,
  sseFrameText,
  stringField,
  textField,
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
  RenderableError,
  RenderState,
  StreamAdapter,
  TerminalInfo,
  TerminalReason,
  UpstreamRequest,
} from './types.js'
import { chatUsageOf, withUsage } from './usage.js'

const dataObject = needle('data: {')
/** `"finish_reason":null` (bit 1) and an `"error"` key (bit 2), found in one pass. */
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

function inspectChunk(body: Record<string, unknown>): FrameVerdict {
  const error = chatError(body)
  if (error !== undefined) return error
  const choices = body.choices
  if (!Array.isArray(choices) || choices.length === 0) return { kind: 'meta' }
  let terminal: TerminalInfo | undefined
  let reasoning: string | undefined
  let tool: string | undefined
  let refusal: string | undefined
  for (const choice of choices) {
    const finish = field(choice, 'finish_reason')
    if (typeof finish === 'string' && terminal === undefined) {
      terminal = { reason: mapReason(reasons, finish), raw: finish }
    }
    const delta = field(choice, 'delta')
    if (delta === undefined || delta === null) continue
    const content = textField(delta, 'content')
    if (content !== undefined) {
      return terminal === undefined
        ? { kind: 'text', text: content }
        : { kind: 'text', text: content, terminal }
    }
    tool ??=
      hasToolData(field(delta, 'tool_calls')) ??
      textField(field(delta, 'function_call'), 'arguments')
    refusal ??= textField(delta, 'refusal')
    reasoning ??= textField(delta, 'reasoning_content') ?? textField(delta, 'reasoning')
  }
  const output =
    tool !== undefined
      ? ({ kind: 'tool', text: tool } as const)
      : refusal !== undefined
        ? ({ kind: 'refusal', text: refusal } as const)
        : reasoning !== undefined
          ? ({ kind: 'reasoning', text: reasoning } as const)
          : undefined
  if (output !== undefined) return terminal === undefined ? output : { ...output, terminal }
  return terminal === undefined ? { kind: 'meta' } : { kind: 'terminal', terminal }
}

/** Where the `openai` SDK stops reading a stream: `if (sse.data.startsWith('[DONE]'))`. */
export function endsAtDone(frame: SseFrame): boolean {
  return frame.data?.startsWith('[DONE]') === true
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
    if (data === undefined) return inspectWithoutData(frame, chatError)
    // Cheap check before JSON.parse: the end marker.
    if (data.startsWith('[DONE]'))
      return { kind: 'terminal', terminal: { reason: null, raw: '[DONE]' } }
    const body = parseData(data)
    if (body === undefined)
      return malformedFrame(`a Chat Completions data frame is not a JSON object: ${data}`)
    return withUsage(inspectChunk(body), chatUsageOf(body))
  },
  quickOutput(frame: SseFrame): boolean {
    // A chunk whose finish_reason is null and that holds no error neither ends nor fails.
    const raw = frame.raw
    return startsWith(raw, dataObject) && endsWithObject(raw) && findNeedles(raw, quickKeys) === 1
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
