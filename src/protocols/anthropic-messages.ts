/**
 * Anthropic Messages streaming (`POST /v1/messages` with `stream: true`): named events from
 * `message_start` to `message_stop`, `ping` keep-alives and `event: error`.
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
  mapReason,
  parseObject,
  renderable,
  sseFrameText,
  stringField,
  textField,
  upstreamError,
} from './common.js'
import { fitAnthropicBudget, pathEndsWith, streamFlagInBody } from './request.js'
import type {
  ErrorVerdict,
  FrameVerdict,
  RenderableError,
  RenderState,
  StreamAdapter,
  TerminalReason,
  UpstreamRequest,
} from './types.js'

const deltaEvent = needle('event: content_block_delta\ndata: {"type":"content_block_delta",')

const reasons: Readonly<Record<string, TerminalReason>> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  pause_turn: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  tool_use: 'tool_use',
  refusal: 'content_filter',
}

function anthropicError(body: Record<string, unknown>): ErrorVerdict | undefined {
  const error = body.error
  if (typeof error !== 'object' || error === null) return undefined
  const type = stringField(error, 'type') ?? 'api_error'
  return { kind: 'error', error: upstreamError(type, stringField(error, 'message'), null, null) }
}

function blockIndex(body: Record<string, unknown>): number {
  const index = body.index
  return typeof index === 'number' ? index : 0
}

function inspectDelta(body: Record<string, unknown>): FrameVerdict {
  const delta = body.delta
  switch (stringField(delta, 'type')) {
    case 'text_delta': {
      const text = textField(delta, 'text')
      return text === undefined ? { kind: 'meta' } : { kind: 'text', text }
    }
    case 'thinking_delta': {
      const text = textField(delta, 'thinking')
      return text === undefined ? { kind: 'meta' } : { kind: 'reasoning', text }
    }
    case 'signature_delta':
      return textField(delta, 'signature') === undefined
        ? { kind: 'meta' }
        : { kind: 'reasoning', text: '' }
    case 'input_json_delta': {
      const json = textField(delta, 'partial_json')
      return json === undefined ? { kind: 'meta' } : { kind: 'tool', text: json }
    }
    case 'citations_delta':
      return { kind: 'text', text: '' }
    default:
      return { kind: 'meta' }
  }
}

function inspectEvent(type: string, body: Record<string, unknown>): FrameVerdict {
  switch (type) {
    case 'ping':
      return { kind: 'keepalive' }
    case 'error':
      return (
        anthropicError(body) ?? {
          kind: 'error',
          error: upstreamError('api_error', 'upstream error event'),
        }
      )
    case 'content_block_delta':
      return inspectDelta(body)
    case 'content_block_start': {
      const block = body.content_block
      const edge = { index: blockIndex(body), edge: 'open' } as const
      const blockType = stringField(block, 'type')
      if (blockType === 'tool_use' || blockType === 'server_tool_use') {
        return { kind: 'tool', text: stringField(block, 'name') ?? '', block: edge }
      }
      const text = blockType === 'text' ? textField(block, 'text') : undefined
      if (text !== undefined) return { kind: 'text', text, block: edge }
      const thinking = blockType === 'thinking' ? textField(block, 'thinking') : undefined
      if (thinking !== undefined) return { kind: 'reasoning', text: thinking, block: edge }
      return { kind: 'meta', block: edge }
    }
    case 'content_block_stop':
      return { kind: 'meta', block: { index: blockIndex(body), edge: 'close' } }
    case 'message_delta': {
      const stop = stringField(body.delta, 'stop_reason')
      return stop === undefined
        ? { kind: 'meta' }
        : { kind: 'terminal', terminal: { reason: mapReason(reasons, stop), raw: stop } }
    }
    case 'message_stop':
      return { kind: 'terminal', terminal: { reason: null, raw: 'message_stop' } }
    default:
      return { kind: 'meta' }
  }
}

function messageOf(state: RenderState | undefined): {
  id: string
  model: string
  outputTokens: number
} {
  const first = state?.firstData === undefined ? undefined : parseObject(state.firstData)
  const message = field(first, 'message')
  const started = field(field(message, 'usage'), 'output_tokens')
  return {
    id: stringField(message, 'id') ?? 'msg_stream_boundary',
    model: stringField(message, 'model') ?? 'unknown',
    outputTokens: typeof started === 'number' ? started : 0,
  }
}

/**
 * The SDK overwrites its running `output_tokens` with the stop's; the true count is unknown
 * here, so report at least one token per output delta seen rather than zero.
 */
function estimatedOutputTokens(state: RenderState): number {
  const { text, tool, reasoning, refusal } = state.counts
  return Math.max(messageOf(state).outputTokens, text + tool + reasoning + refusal)
}

function event(type: string, body: Record<string, unknown>): string {
  return sseFrameText(JSON.stringify({ type, ...body }), type)
}

function blockFrames(index: number, block: unknown): string {
  const type = stringField(block, 'type')
  const stop = event('content_block_stop', { index })
  const delta = (body: Record<string, unknown>) =>
    event('content_block_delta', { index, delta: body })
  switch (type) {
    case 'text': {
      const text = stringField(block, 'text') ?? ''
      const start = event('content_block_start', {
        index,
        content_block: { ...(block as object), text: '' },
      })
      return start + (text === '' ? '' : delta({ type: 'text_delta', text })) + stop
    }
    case 'thinking': {
      const thinking = stringField(block, 'thinking') ?? ''
      const signature = stringField(block, 'signature') ?? ''
      const start = event('content_block_start', {
        index,
        content_block: { type: 'thinking', thinking: '', signature: '' },
      })
      return (
        start +
        (thinking === '' ? '' : delta({ type: 'thinking_delta', thinking })) +
        (signature === '' ? '' : delta({ type: 'signature_delta', signature })) +
        stop
      )
    }
    case 'tool_use':
    case 'server_tool_use': {
      const input = JSON.stringify(field(block, 'input') ?? {})
      const start = event('content_block_start', {
        index,
        content_block: { ...(block as object), input: {} },
      })
      return (
        start +
        (input === '{}' ? '' : delta({ type: 'input_json_delta', partial_json: input })) +
        stop
      )
    }
    default:
      return event('content_block_start', { index, content_block: block }) + stop
  }
}

function anthropicFromMessage(message: unknown): Uint8Array {
  const whole =
    typeof message === 'object' && message !== null ? (message as Record<string, unknown>) : {}
  const content = Array.isArray(whole.content) ? (whole.content as unknown[]) : []
  const usage = field(whole, 'usage')
  let out = event('message_start', {
    message: {
      ...whole,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { ...(usage as object), output_tokens: 1 },
    },
  })
  for (const [index, block] of content.entries()) out += blockFrames(index, block)
  out += event('message_delta', {
    delta: {
      stop_reason: whole.stop_reason ?? 'end_turn',
      stop_sequence: whole.stop_sequence ?? null,
    },
    usage: { output_tokens: field(usage, 'output_tokens') ?? 0 },
  })
  out += event('message_stop', {})
  return encode(out)
}

/**
 * The Anthropic Messages adapter.
 *
 * - `text_delta` is text, `thinking_delta` and `signature_delta` are reasoning,
 *   `input_json_delta` and a `tool_use` block start are tool output; `ping` is a keep-alive.
 * - `message_delta` with a `stop_reason`, and `message_stop`, are terminal.
 * - `event: error` is an error: `overloaded_error`, `rate_limit_error`, `api_error` are retryable.
 *
 * Rendered error: `event: error` (the official SDK raises it as an `APIError`). Rendered stop:
 * `content_block_stop` for each open block, `message_delta` with `end_turn`, `message_stop`.
 */
export const anthropicMessages: StreamAdapter = Object.freeze({
  name: 'anthropic-messages',
  inspect(frame: SseFrame): FrameVerdict {
    const data = frame.data
    if (data === undefined) return inspectWithoutData(frame, anthropicError)
    // Cheap check before JSON.parse: a ping needs no parsing.
    if (frame.event === 'ping') return { kind: 'keepalive' }
    const body = parseObject(data)
    if (body === undefined)
      return malformedFrame(`an Anthropic data frame is not a JSON object: ${data}`)
    const type = frame.event ?? stringField(body, 'type')
    if (type === undefined) return anthropicError(body) ?? { kind: 'meta' }
    return inspectEvent(type, body)
  },
  quickOutput(frame: SseFrame): boolean {
    return startsWith(frame.raw, deltaEvent) && endsWithObject(frame.raw)
  },
  renderError(error: RenderableError): Uint8Array {
    const { type, message } = renderable(error)
    return encode(event('error', { error: { type, message } }))
  },
  renderErrorBody(error: RenderableError): string {
    const { type, message } = renderable(error)
    return JSON.stringify({ type: 'error', error: { type, message } })
  },
  nonStreamingRequest: (request: UpstreamRequest): UpstreamRequest => ({
    url: request.url,
    body: { ...request.body, stream: false },
  }),
  credentialHeader: (secret: string): readonly [string, string] => ['x-api-key', secret],
  matchesUrl: pathEndsWith('/messages'),
  isStreamingRequest: streamFlagInBody,
  fitOutputBudget: fitAnthropicBudget,
  renderFromMessage: anthropicFromMessage,
  renderStop(state: RenderState): Uint8Array {
    let out = ''
    if (state.firstData === undefined) {
      const { id, model } = messageOf(state)
      out += event('message_start', {
        message: {
          id,
          type: 'message',
          role: 'assistant',
          content: [],
          model,
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 0, output_tokens: 0 },
        },
      })
    }
    for (const index of state.openBlocks) out += event('content_block_stop', { index })
    const stop = state.counts.tool > 0 && state.counts.text === 0 ? 'tool_use' : 'end_turn'
    out += event('message_delta', {
      delta: { stop_reason: stop, stop_sequence: null },
      usage: { output_tokens: estimatedOutputTokens(state) },
    })
    out += event('message_stop', {})
    return encode(out)
  },
  renderReasoningAsText(state: RenderState): Uint8Array {
    let out = ''
    for (const index of state.openBlocks) out += event('content_block_stop', { index })
    const index = state.lastBlockIndex + 1
    out += event('content_block_start', { index, content_block: { type: 'text', text: '' } })
    out += event('content_block_delta', {
      index,
      delta: { type: 'text_delta', text: state.reasoningText },
    })
    out += event('content_block_stop', { index })
    return encode(out)
  },
})
