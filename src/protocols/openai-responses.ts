/**
 * OpenAI Responses streaming (`POST /v1/responses` with `stream: true`): typed events from
 * `response.created` to `response.completed`, `response.incomplete` or `response.failed`.
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'
import { endsWithObject, needle, startsWith } from './bytes.js'
import {
  encode,
  field,
  inspectWithoutData,
  malformedFrame,
  parseData,
  renderable,
  sseFrameText,
  stringField,
  textField,
  upstreamError,
} from './common.js'
import { endsAtDone, openaiErrorBody, openaiScalarError, withoutStreaming } from './openai-chat.js'
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
} from './types.js'
import { responsesUsage, withUsage } from './usage.js'

const toolItems = new Set([
  'function_call',
  'custom_tool_call',
  'mcp_call',
  'computer_call',
  'local_shell_call',
])
const toolDeltas = new Set([
  'response.function_call_arguments.delta',
  'response.custom_tool_call_input.delta',
  'response.mcp_call_arguments.delta',
])
const reasoningDeltas = new Set([
  'response.reasoning_summary_text.delta',
  'response.reasoning_text.delta',
  'response.reasoning.delta',
])

const outputDeltas = [
  'response.output_text.delta',
  'response.function_call_arguments.delta',
  'response.reasoning_summary_text.delta',
  'response.reasoning_text.delta',
  'response.refusal.delta',
].map((event) => needle(`event: ${event}\ndata: {"type":"${event}",`))

function errorFrom(error: unknown, fallbackType: string): ErrorVerdict {
  const code = stringField(error, 'code') ?? null
  const type = stringField(error, 'type') ?? code ?? fallbackType
  return { kind: 'error', error: upstreamError(type, stringField(error, 'message'), code) }
}

function responsesError(body: Record<string, unknown>): ErrorVerdict | undefined {
  // Nested (`{"error":{…}}`) or flat (`{"type":"error","code":…,"message":…}`).
  if (typeof body.error === 'object' && body.error !== null)
    return errorFrom(body.error, 'server_error')
  if (body.error) return openaiScalarError(body.error)
  if (body.type === 'error') return errorFrom({ ...body, type: undefined }, 'server_error')
  return undefined
}

function outputIndex(body: Record<string, unknown>): number {
  const index = body.output_index
  return typeof index === 'number' ? index : 0
}

function inspectEvent(type: string, body: Record<string, unknown>): FrameVerdict {
  switch (type) {
    case 'response.output_text.delta': {
      const text = textField(body, 'delta')
      return text === undefined ? { kind: 'meta' } : { kind: 'text', text }
    }
    case 'response.refusal.delta': {
      const text = textField(body, 'delta')
      return text === undefined ? { kind: 'meta' } : { kind: 'refusal', text }
    }
    case 'response.output_item.added': {
      const item = body.item
      const edge = { index: outputIndex(body), edge: 'open' } as const
      if (toolItems.has(stringField(item, 'type') ?? '')) {
        return { kind: 'tool', text: stringField(item, 'name') ?? '', block: edge }
      }
      return { kind: 'meta', block: edge }
    }
    case 'response.output_item.done':
      return { kind: 'meta', block: { index: outputIndex(body), edge: 'close' } }
    case 'response.completed':
      return { kind: 'terminal', terminal: { reason: 'stop', raw: 'completed' } }
    case 'response.incomplete': {
      const reason =
        stringField(field(body.response, 'incomplete_details'), 'reason') ?? 'incomplete'
      const normalised =
        reason === 'max_output_tokens'
          ? 'length'
          : reason === 'content_filter'
            ? 'content_filter'
            : 'incomplete'
      return { kind: 'terminal', terminal: { reason: normalised, raw: reason } }
    }
    case 'response.failed':
      return errorFrom(field(body.response, 'error'), 'server_error')
    case 'error':
      return responsesError(body) ?? errorFrom(body, 'server_error')
    default:
      if (toolDeltas.has(type)) {
        const text = textField(body, 'delta')
        return text === undefined ? { kind: 'meta' } : { kind: 'tool', text }
      }
      if (reasoningDeltas.has(type)) {
        const text = textField(body, 'delta')
        return text === undefined ? { kind: 'meta' } : { kind: 'reasoning', text }
      }
      return { kind: 'meta' }
  }
}

function responsesFromMessage(message: unknown): Uint8Array {
  const response =
    typeof message === 'object' && message !== null ? (message as Record<string, unknown>) : {}
  const output = Array.isArray(response.output) ? (response.output as unknown[]) : []
  let sequence = 0
  const frame = (type: string, body: Record<string, unknown>) => event(type, sequence++, body)
  let out = frame('response.created', {
    response: { ...response, status: 'in_progress', output: [] },
  })
  out += frame('response.in_progress', {
    response: { ...response, status: 'in_progress', output: [] },
  })
  for (const [index, item] of output.entries()) {
    const type = stringField(item, 'type')
    const id = stringField(item, 'id')
    if (type === 'message') {
      out += frame('response.output_item.added', {
        output_index: index,
        item: { ...(item as object), status: 'in_progress', content: [] },
      })
      const content = field(item, 'content')
      for (const [part, piece] of (Array.isArray(content) ? content : []).entries()) {
        const common = { item_id: id, output_index: index, content_index: part }
        const text = stringField(piece, 'text') ?? stringField(piece, 'refusal') ?? ''
        const refusal = stringField(piece, 'type') === 'refusal'
        out += frame('response.content_part.added', {
          ...common,
          part: { ...(piece as object), [refusal ? 'refusal' : 'text']: '' },
        })
        if (text !== '') {
          out += frame(refusal ? 'response.refusal.delta' : 'response.output_text.delta', {
            ...common,
            delta: text,
          })
        }
        out += frame(refusal ? 'response.refusal.done' : 'response.output_text.done', {
          ...common,
          [refusal ? 'refusal' : 'text']: text,
        })
        out += frame('response.content_part.done', { ...common, part: piece })
      }
    } else if (type === 'function_call') {
      out += frame('response.output_item.added', {
        output_index: index,
        item: { ...(item as object), status: 'in_progress', arguments: '' },
      })
      const args = stringField(item, 'arguments') ?? ''
      if (args !== '')
        out += frame('response.function_call_arguments.delta', {
          item_id: id,
          output_index: index,
          delta: args,
        })
      out += frame('response.function_call_arguments.done', {
        item_id: id,
        output_index: index,
        arguments: args,
      })
    } else {
      out += frame('response.output_item.added', { output_index: index, item })
    }
    out += frame('response.output_item.done', { output_index: index, item })
  }
  const status = stringField(response, 'status')
  const end =
    status === 'incomplete'
      ? 'response.incomplete'
      : status === 'failed'
        ? 'response.failed'
        : 'response.completed'
  out += frame(end, { response })
  return encode(out)
}

function responseOf(state: RenderState | undefined): Record<string, unknown> {
  const first = state?.firstData === undefined ? undefined : parseData(state.firstData)
  const response = field(first, 'response')
  return typeof response === 'object' && response !== null
    ? { ...(response as Record<string, unknown>) }
    : {
        id: 'resp_stream_boundary',
        object: 'response',
        created_at: Math.floor(Date.now() / 1000),
        model: 'unknown',
      }
}

function event(type: string, sequence: number, body: Record<string, unknown>): string {
  return sseFrameText(JSON.stringify({ type, sequence_number: sequence, ...body }), type)
}

/**
 * The OpenAI Responses adapter.
 *
 * - `response.output_text.delta` is text, `response.refusal.delta` a refusal, reasoning
 *   summary/text deltas are reasoning, function-call argument deltas and an added
 *   `function_call` item are tool output.
 * - `response.completed` and `response.incomplete` are terminal; `response.failed`,
 *   `event: error` (nested or flat error fields) and any event whose `error` is truthy (the
 *   SDK raises on it) are errors.
 *
 * Rendered error: `event: error` carrying both the flat fields of the Responses error event and
 * an `error` object (the official SDK raises it as an `APIError`). Rendered stop:
 * `response.completed` with the response object from `response.created`.
 *
 * @group Protocols
 */
export const openaiResponses: StreamAdapter = Object.freeze({
  name: 'openai-responses',
  // A keep-alive event every 30 s when nothing else is sent (OpenAI, for reasoning without summaries).
  sendsWhileThinking: true,
  // `response.completed` replaces the client's accumulated response: it must carry the text.
  trackerDefaults: Object.freeze({ keepTextChars: 262_144 }),
  inspect(frame: SseFrame): FrameVerdict {
    const data = frame.data
    if (data === undefined) return inspectWithoutData(frame, responsesError)
    const body = parseData(data)
    if (body === undefined)
      return malformedFrame(`a Responses data frame is not a JSON object: ${data}`)
    // The SDK raises on a truthy `error` in any event, whatever its type.
    const raised = body.error ? responsesError(body) : undefined
    if (raised !== undefined) return raised
    const type = stringField(body, 'type') ?? frame.event
    if (type === undefined) return responsesError(body) ?? { kind: 'meta' }
    return withUsage(inspectEvent(type, body), responsesUsage(field(body.response, 'usage')))
  },
  quickOutput(frame: SseFrame): boolean {
    return endsWithObject(frame.raw) && outputDeltas.some((event) => startsWith(frame.raw, event))
  },
  // Not the protocol's end, but the SDK's all the same: it shares Chat's stream reader.
  clientEndsAt: endsAtDone,
  renderError(error: RenderableError, state?: RenderState): Uint8Array {
    const { type, message, code } = renderable(error)
    return encode(
      event('error', state?.frames ?? 0, {
        code: code ?? type,
        message,
        param: null,
        error: { type, code: code ?? type, message },
      }),
    )
  },
  renderErrorBody: openaiErrorBody,
  nonStreamingRequest: withoutStreaming,
  credentialHeader: bearerCredential,
  invalidRequest: modelNamedInBody,
  matchesUrl: pathEndsWith('/responses'),
  isStreamingRequest: streamFlagInBody,
  fitOutputBudget: fitTopLevelBudget(['max_output_tokens']),
  renderFromMessage: responsesFromMessage,
  usageOf: (message: unknown) => responsesUsage(field(message, 'usage')),
  renderStop(state: RenderState): Uint8Array {
    const response = responseOf(state)
    const output =
      state.visibleText === ''
        ? []
        : [
            {
              id: 'msg_stream_boundary',
              type: 'message',
              status: 'completed',
              role: 'assistant',
              content: [{ type: 'output_text', text: state.visibleText, annotations: [] }],
            },
          ]
    return encode(
      event('response.completed', state.frames, {
        response: { ...response, status: 'completed', output },
      }),
    )
  },
  renderReasoningAsText(state: RenderState): Uint8Array {
    const index = state.lastBlockIndex + 1
    const item = {
      id: 'msg_stream_boundary',
      type: 'message',
      status: 'in_progress',
      role: 'assistant',
      content: [],
    }
    const part = { type: 'output_text', text: state.reasoningText, annotations: [] }
    let sequence = state.frames
    const common = { item_id: item.id, output_index: index, content_index: 0 }
    let out = event('response.output_item.added', sequence++, { output_index: index, item })
    out += event('response.content_part.added', sequence++, {
      ...common,
      part: { ...part, text: '' },
    })
    out += event('response.output_text.delta', sequence++, {
      ...common,
      delta: state.reasoningText,
    })
    out += event('response.output_text.done', sequence++, { ...common, text: state.reasoningText })
    out += event('response.content_part.done', sequence++, { ...common, part })
    out += event('response.output_item.done', sequence++, {
      output_index: index,
      item: { ...item, status: 'completed', content: [part] },
    })
    return encode(out)
  },
})
