/**
 * OpenAI Responses streaming (`POST /v1/responses` with `stream: true`): typed events from
 * `response.created` to `response.completed`, `response.incomplete` or `response.failed`.
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'
import { endsWithObject, needle, startsWith } from './bytes.js'
import {
  carriesContent,
  encode,
  field,
  inspectWithoutData,
  malformedFrame,
  noLineBreakFrom,
  parseData,
  renderable,
  sseFrameText,
  stringField,
  textField,
  unknownOutput,
  upstreamError,
} from './common.js'
import {
  endsAtDone,
  openaiErrorBody,
  openaiScalarError,
  openaiUnreadable,
  withoutStreaming,
} from './openai-chat.js'
import {
  bearerCredential,
  fitTopLevelBudget,
  modelNamedInBody,
  pathEndsWith,
  streamFlagInBody,
} from './request.js'
import type {
  BlockEdge,
  ErrorVerdict,
  FrameVerdict,
  RenderableError,
  RenderState,
  StreamAdapter,
} from './types.js'
import { responsesUsage, withUsage } from './usage.js'

/**
 * Items the model writes as a call for the client (or a client-visible action) to act on:
 * `tool` from the moment they are added. `tool_search_call` is one only when the client
 * executes it (`execution: "client"`).
 */
const toolItems: ReadonlySet<string> = new Set([
  'function_call',
  'custom_tool_call',
  'apply_patch_call',
  'shell_call',
  'local_shell_call',
  'computer_call',
  'mcp_call',
  'mcp_approval_request',
  'code_interpreter_call',
])
/**
 * Items that carry nothing a client shows when they are added: a message's and a summary's
 * text comes in deltas, and server-side work (a search, listing an MCP server's tools,
 * compaction, an image being made) shows nothing until it has a result, which the final
 * answer cites. Held, so a retry before the answer stays possible; the peek's bounds commit
 * a stream that runs long (guarantee 27 in docs/guarantees.md).
 */
const quietItems: ReadonlySet<string> = new Set([
  'message',
  'web_search_call',
  'file_search_call',
  'mcp_list_tools',
  'image_generation_call',
  'compaction',
  'tool_search_call',
])

type DeltaKind = 'text' | 'refusal' | 'reasoning' | 'tool' | 'output'

/**
 * Events whose `delta` (or image, or output) is what the client shows, by kind: `text` and
 * `refusal` carry their text; `output` is content of a server-side result (a partial image,
 * a hosted shell's output, audio) counted as text without text.
 */
const deltaKinds: Readonly<Record<string, DeltaKind>> = {
  'response.output_text.delta': 'text',
  'response.refusal.delta': 'refusal',
  'response.reasoning_summary_text.delta': 'reasoning',
  'response.reasoning_text.delta': 'reasoning',
  'response.reasoning.delta': 'reasoning',
  'response.function_call_arguments.delta': 'tool',
  'response.custom_tool_call_input.delta': 'tool',
  'response.mcp_call_arguments.delta': 'tool',
  'response.code_interpreter_call_code.delta': 'tool',
  'response.apply_patch_call_operation_diff.delta': 'tool',
  'response.shell_call_command.delta': 'tool',
  'response.shell_call_command.added': 'tool',
  'response.shell_call_output_content.delta': 'output',
  'response.image_generation_call.partial_image': 'output',
  'response.audio.delta': 'output',
  'response.audio.transcript.delta': 'output',
  'response.output_text.annotation.added': 'output',
}

/** Lifecycle events with nothing for the client to see, besides the sub-item statuses below. */
const metaEvents: ReadonlySet<string> = new Set([
  'response.created',
  'response.in_progress',
  'response.queued',
  'response.reasoning_summary_part.added',
  'response.steer',
  'keepalive',
])
/**
 * A sub-item's status or a finished part (`response.web_search_call.searching`,
 * `response.output_text.done`…): `.done` events repeat what their deltas already carried,
 * status events carry none.
 */
const statusSuffix =
  /\.(?:done|in_progress|searching|interpreting|generating|compacting|completed|failed|incomplete|pending|accepted)$/

/** Members of an event or item that are never shown: ids, indexes, types, padding. */
const notContent: ReadonlySet<string> = new Set([
  'type',
  'id',
  'status',
  'sequence_number',
  'item_id',
  'output_index',
  'content_index',
  'summary_index',
  'annotation_index',
  'command_index',
  'obfuscation',
  'logprobs',
  'created_by',
  'response',
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

/** An added item: a tool call, reasoning with text, or unknown content, else bookkeeping. */
function addedItem(body: Record<string, unknown>): FrameVerdict {
  const item = body.item
  const block = { index: outputIndex(body), edge: 'open' } as const
  const type = stringField(item, 'type') ?? ''
  const execution = stringField(item, 'execution')
  const clientCall =
    toolItems.has(type) ||
    (type === 'tool_search_call' && execution === 'client') ||
    // An item type the adapter does not know, with a call id: a call the client acts on.
    (!quietItems.has(type) && type !== 'reasoning' && textField(item, 'call_id') !== undefined)
  if (clientCall) return { kind: 'tool', text: stringField(item, 'name') ?? '', block }
  if (type === 'reasoning') {
    return carriesContent(field(item, 'summary'), notContent) ||
      carriesContent(field(item, 'content'), notContent)
      ? { kind: 'reasoning', text: '', block }
      : { kind: 'meta', block }
  }
  if (quietItems.has(type) || !carriesContent(item, notContent)) return { kind: 'meta', block }
  return { ...unknownOutput, block }
}

/** A finished message: a refusal when its parts are refusals only, else output if any part has content. */
function doneMessage(parts: unknown, block: BlockEdge): FrameVerdict {
  if (!Array.isArray(parts) || !carriesContent(parts, notContent)) return { kind: 'meta', block }
  const refusal = parts.every((part) => stringField(part, 'type') === 'refusal')
  return refusal ? { kind: 'refusal', text: '', block } : { ...unknownOutput, block }
}

/**
 * A finished item is judged by its item, as an added one is (a message that came whole in its
 * `done` event, with no delta before it, is output the SDK shows), and closes its index.
 */
function doneItem(body: Record<string, unknown>): FrameVerdict {
  const block = { index: outputIndex(body), edge: 'close' } as const
  const item = body.item
  // A message starts quiet (its role is no content), but one that is done holds its parts.
  if (stringField(item, 'type') === 'message') return doneMessage(field(item, 'content'), block)
  const added = addedItem(body)
  switch (added.kind) {
    case 'text':
    case 'tool':
    case 'reasoning':
    case 'refusal':
      return { ...added, block }
    default:
      return { kind: 'meta', block }
  }
}

/** An event that carries a delta (or image, or output) of a known kind. */
function deltaVerdict(kind: DeltaKind, body: Record<string, unknown>): FrameVerdict {
  if (kind === 'text' || kind === 'refusal' || kind === 'reasoning') {
    const text = textField(body, 'delta')
    if (text !== undefined) return { kind, text }
    return kind !== 'reasoning' || !carriesContent(body, notContent)
      ? { kind: 'meta' }
      : { kind, text: '' }
  }
  if (!carriesContent(body, notContent)) return { kind: 'meta' }
  return kind === 'tool' ? { kind: 'tool', text: textField(body, 'delta') ?? '' } : unknownOutput
}

function inspectEvent(type: string, body: Record<string, unknown>): FrameVerdict {
  switch (type) {
    case 'response.output_item.added':
      return addedItem(body)
    case 'response.output_item.done':
      return doneItem(body)
    case 'response.content_part.added':
      // A part starts empty; its text comes in deltas. One that starts with content is output.
      return carriesContent(body.part, notContent) ? unknownOutput : { kind: 'meta' }
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
    default: {
      const kind = Object.hasOwn(deltaKinds, type) ? deltaKinds[type] : undefined
      if (kind !== undefined) return deltaVerdict(kind, body)
      if (metaEvents.has(type) || type.startsWith('response.steer') || statusSuffix.test(type))
        return { kind: 'meta' }
      // An event the adapter does not know: output when it carries content (fail open).
      return carriesContent(body, notContent) ? unknownOutput : { kind: 'meta' }
    }
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
 *   summary/text deltas are reasoning; an added call item (`function_call`, `apply_patch_call`,
 *   `shell_call`, `mcp_approval_request`, a client `tool_search_call`…) and its input deltas
 *   are tool output.
 * - Lifecycle events, `.done` events, sub-item statuses and server-side work that shows
 *   nothing yet (a search running) are `meta`; any other event or item with content, known or
 *   not, is output (guarantee 27).
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
    const unreadable = openaiUnreadable(frame)
    if (unreadable !== undefined) return unreadable
    const data = frame.data
    if (data === undefined) return inspectWithoutData(frame, responsesError)
    // OpenRouter ends a Responses stream as a Chat one, and the SDK stops reading at exactly
    // `[DONE]` in every stream: the client's end, as in Chat.
    if (data === '[DONE]') return { kind: 'terminal', terminal: { reason: null, raw: '[DONE]' } }
    const body = parseData(data)
    if (body === undefined)
      return malformedFrame(`a Responses data frame is not a JSON object: ${data}`)
    // The SDK raises on a truthy `error` in any event, whatever its type, and 7.x on any
    // `event: error`, whatever its data.
    const raised = body.error ? responsesError(body) : undefined
    if (raised !== undefined) return raised
    if (frame.event === 'error')
      return responsesError(body) ?? errorFrom({ ...body, type: undefined }, 'server_error')
    const type = stringField(body, 'type') ?? frame.event
    if (type === undefined) return responsesError(body) ?? { kind: 'meta' }
    return withUsage(inspectEvent(type, body), responsesUsage(field(body.response, 'usage')))
  },
  quickOutput(frame: SseFrame): boolean {
    const raw = frame.raw
    const event = outputDeltas.find((prefix) => startsWith(raw, prefix))
    // Its data line is its last: no `event: error` after it makes it an error.
    return event !== undefined && endsWithObject(raw) && noLineBreakFrom(raw, event.bytes.length)
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
