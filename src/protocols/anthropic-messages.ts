/**
 * Anthropic Messages streaming (`POST /v1/messages` with `stream: true`): named events from
 * `message_start` to `message_stop`, `ping` keep-alives and `event: error`.
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'
import { anthropicContinuation, anthropicSplice } from './anthropic-continuation.js'
import { endsWithObject, needle, startsWith } from './bytes.js'
import {
  carriesContent,
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
  unknownOutput,
  upstreamError,
} from './common.js'
import { fitAnthropicBudget, modelNamedInBody, pathEndsWith, streamFlagInBody } from './request.js'
import type {
  ErrorVerdict,
  FrameVerdict,
  RenderableError,
  RenderState,
  StreamAdapter,
  TerminalReason,
  UpstreamRequest,
} from './types.js'
import { anthropicUsage, withUsage } from './usage.js'

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

/** Anthropic's documented error types, by the HTTP status each comes with (API docs, "Errors"). */
const typeByStatus = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  504: 'timeout_error',
  529: 'overloaded_error',
} as const

/** One of Anthropic's documented error types, the only ones its clients know. */
type AnthropicErrorType = (typeof typeByStatus)[keyof typeof typeByStatus]

/** The error types the library writes itself that Anthropic does not document. */
type LibraryErrorType =
  | 'upstream_error'
  | 'internal_error'
  | 'client_closed'
  | 'timeout'
  | 'service_unavailable'
  | 'malformed_frame'

/**
 * Error types an Anthropic client may be sent, and the documented type each becomes. The
 * compiler checks that every documented type maps to itself and every library type is here.
 * `service_unavailable` (every key busy or cooling, with `Retry-After`) is capacity, which is
 * what `overloaded_error` tells a client, and clients back off and retry on it; `api_error`
 * would report a fault inside the provider.
 */
const errorTypes = {
  invalid_request_error: 'invalid_request_error',
  authentication_error: 'authentication_error',
  billing_error: 'billing_error',
  permission_error: 'permission_error',
  not_found_error: 'not_found_error',
  request_too_large: 'request_too_large',
  rate_limit_error: 'rate_limit_error',
  api_error: 'api_error',
  timeout_error: 'timeout_error',
  overloaded_error: 'overloaded_error',
  // The library's own.
  upstream_error: 'api_error',
  internal_error: 'api_error',
  client_closed: 'api_error',
  timeout: 'timeout_error',
  service_unavailable: 'overloaded_error',
  malformed_frame: 'api_error',
  // OpenAI's types and codes (a gateway serving Anthropic clients from OpenAI upstreams).
  server_error: 'api_error',
  internal_server_error: 'api_error',
  service_unavailable_error: 'overloaded_error',
  rate_limit_exceeded: 'rate_limit_error',
  insufficient_quota: 'billing_error',
  invalid_api_key: 'authentication_error',
  model_not_found: 'not_found_error',
  context_length_exceeded: 'invalid_request_error',
  invalid_prompt: 'invalid_request_error',
  // Gemini's statuses.
  INVALID_ARGUMENT: 'invalid_request_error',
  FAILED_PRECONDITION: 'invalid_request_error',
  UNAUTHENTICATED: 'authentication_error',
  PERMISSION_DENIED: 'permission_error',
  NOT_FOUND: 'not_found_error',
  RESOURCE_EXHAUSTED: 'rate_limit_error',
  INTERNAL: 'api_error',
  UNAVAILABLE: 'overloaded_error',
  DEADLINE_EXCEEDED: 'timeout_error',
} as const satisfies { readonly [Type in AnthropicErrorType]: Type } & {
  readonly [Type in LibraryErrorType]: AnthropicErrorType
} & Readonly<Record<string, AnthropicErrorType>>

const knownTypes: Readonly<Record<string, AnthropicErrorType>> = errorTypes

function typeForStatus(status: number | null | undefined): AnthropicErrorType {
  if (status == null) return 'api_error'
  if (Object.hasOwn(typeByStatus, status)) return typeByStatus[status as keyof typeof typeByStatus]
  if (status === 408) return 'timeout_error'
  if (status === 503) return 'overloaded_error'
  return status >= 400 && status < 500 ? 'invalid_request_error' : 'api_error'
}

/**
 * The documented Anthropic error type to report for `error`: its type, else its code, through
 * the table of known types; else the type of its HTTP-like status; else `api_error`.
 *
 * @example
 * anthropicErrorType({ type: 'upstream_error', message: '' }) // 'api_error'
 * anthropicErrorType({ type: 'oops', message: '', status: 403 }) // 'permission_error'
 * @internal exported for tests
 */
export function anthropicErrorType(error: RenderableError): AnthropicErrorType {
  for (const word of [error.type, error.code]) {
    if (word != null && Object.hasOwn(knownTypes, word))
      return knownTypes[word] as AnthropicErrorType
  }
  return typeForStatus(error.status)
}

function anthropicError(body: Record<string, unknown>): ErrorVerdict | undefined {
  const error = body.error
  if (typeof error !== 'object' || error === null) return undefined
  const type = stringField(error, 'type') ?? 'api_error'
  return { kind: 'error', error: upstreamError(type, stringField(error, 'message'), null, null) }
}

/** An `event: error` that says nothing more (no data, or data without an `error` object). */
const errorEventWithoutDetail: ErrorVerdict = Object.freeze({
  kind: 'error',
  error: Object.freeze(upstreamError('api_error', 'upstream error event')),
})

function blockIndex(body: Record<string, unknown>): number {
  const index = body.index
  return typeof index === 'number' ? index : 0
}

/** Members of an unknown block or delta that are never shown: ids, indexes, types. */
const notContent: ReadonlySet<string> = new Set(['type', 'id', 'index'])

/** Blocks that name a call: the client's own tool, a server tool, an MCP server's tool. */
const toolBlocks: ReadonlySet<string> = new Set(['tool_use', 'server_tool_use', 'mcp_tool_use'])

/**
 * Blocks and deltas that carry nothing the client shows: compaction is a summary of the
 * earlier context for the API to read back, not part of the answer.
 */
const quietTypes: ReadonlySet<string> = new Set(['compaction', 'compaction_delta'])

function inspectDelta(body: Record<string, unknown>): FrameVerdict {
  const delta = body.delta
  const type = stringField(delta, 'type')
  switch (type) {
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
      // A delta type the adapter does not know: output when it carries content (fail open).
      if (type !== undefined && quietTypes.has(type)) return { kind: 'meta' }
      return carriesContent(delta, notContent) ? unknownOutput : { kind: 'meta' }
  }
}

/**
 * A block start: text and thinking with their first text, a call (`tool`), redacted thinking
 * (reasoning), and any other block with content (a server tool's result, a type the adapter
 * does not know) output; an empty block, or compaction, is bookkeeping.
 */
function blockStart(body: Record<string, unknown>): FrameVerdict {
  const block = body.content_block
  const edge = { index: blockIndex(body), edge: 'open' } as const
  const type = stringField(block, 'type') ?? ''
  if (toolBlocks.has(type))
    return { kind: 'tool', text: stringField(block, 'name') ?? '', block: edge }
  if (type === 'text') {
    const text = textField(block, 'text')
    return text === undefined ? { kind: 'meta', block: edge } : { kind: 'text', text, block: edge }
  }
  if (type === 'thinking') {
    const text = textField(block, 'thinking')
    return text === undefined
      ? { kind: 'meta', block: edge }
      : { kind: 'reasoning', text, block: edge }
  }
  if (type === 'redacted_thinking') return { kind: 'reasoning', text: '', block: edge }
  if (quietTypes.has(type) || !carriesContent(block, notContent))
    return { kind: 'meta', block: edge }
  return { ...unknownOutput, block: edge }
}

/**
 * A `message_start` whose message already holds content (programmatic tool calling starts a
 * message with its `tool_use` in it): the SDK takes that message as its snapshot, so its
 * blocks are output, judged as a block start would be (without an open block: they are whole).
 */
function startedWithContent(body: Record<string, unknown>): FrameVerdict {
  const content = field(body.message, 'content')
  if (!Array.isArray(content)) return { kind: 'meta' }
  let found: FrameVerdict = { kind: 'meta' }
  for (const block of content) {
    const { block: _edge, ...verdict } = blockStart({ content_block: block }) as FrameVerdict & {
      block?: unknown
    }
    if (verdict.kind === 'tool') return verdict
    if (found.kind === 'meta') found = verdict
  }
  return found
}

function inspectEvent(type: string, body: Record<string, unknown>): FrameVerdict {
  switch (type) {
    case 'message_start':
      return startedWithContent(body)
    case 'ping':
      return { kind: 'keepalive' }
    case 'error':
      return anthropicError(body) ?? errorEventWithoutDetail
    case 'content_block_delta':
      return inspectDelta(body)
    case 'content_block_start':
      return blockStart(body)
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
      // The SDK's stream acts on the events above only (`clientIgnores`): what any other
      // carries, no client shows.
      return { kind: 'meta' }
  }
}

/**
 * How far the client got into a message. A `message_start` is an Anthropic stream's first event
 * and the tracker keeps the first data frame: `started` when that frame is one, or when frames
 * with output or blocks came and none was kept (each longer than `keepFirstDataChars`); `none`
 * when no data frame came; `headless` when the stream began with something else (the SDK
 * ignores every event before a `message_start`).
 */
function messageProgress(state: RenderState): 'none' | 'headless' | 'started' {
  if (state.firstData !== undefined) {
    const type = stringField(parseData(state.firstData), 'type')
    return type === 'message_start' ? 'started' : 'headless'
  }
  const { text, tool, reasoning, refusal } = state.counts
  const dataCame = state.lastBlockIndex >= 0 || text + tool + reasoning + refusal > 0
  return state.frames > 0 && dataCame ? 'started' : 'none'
}

function messageOf(state: RenderState | undefined): {
  id: string
  model: string
  outputTokens: number
} {
  const first = state?.firstData === undefined ? undefined : parseData(state.firstData)
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

/** A `message_start` for a message the library begins itself: ids and model as far as known. */
function messageStart(state: RenderState): string {
  const { id, model } = messageOf(state)
  return event('message_start', {
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

/** The events the official SDK's stream reads; it skips every other frame. */
const clientEvents: ReadonlySet<string> = new Set([
  'message_start',
  'message_delta',
  'message_stop',
  'content_block_start',
  'content_block_delta',
  'content_block_stop',
  'ping',
  'error',
  'completion',
])

/**
 * The Anthropic Messages adapter.
 *
 * - `text_delta` is text, `thinking_delta` and `signature_delta` are reasoning,
 *   `input_json_delta` and a `tool_use` block start are tool output; `ping` is a keep-alive.
 * - A server tool's result block and any block or delta type it does not know, with content,
 *   are output (guarantee 27); an empty block start, compaction and events the SDK skips are
 *   `meta`.
 * - `message_delta` with a `stop_reason`, and `message_stop`, are terminal.
 * - `event: error` is an error, with data or without (the SDK raises on either):
 *   `overloaded_error`, `rate_limit_error`, `api_error` are retryable.
 *
 * Rendered error: `event: error` after commit, `{"type":"error","error":{…}}` before (the
 * official SDK raises either as an `APIError`), always with one of Anthropic's documented
 * types (`anthropicErrorType`). Rendered stop: `content_block_stop` for each open block,
 * `message_delta` with `end_turn`, `message_stop`. Promoted reasoning begins with a
 * `message_start` when the client was sent none.
 *
 * Continuation (`continueAfterCut`): the received text, trailing whitespace trimmed (Anthropic
 * refuses it), as the final assistant message; never with extended thinking.
 *
 * @group Protocols
 */
export const anthropicMessages: StreamAdapter = Object.freeze({
  name: 'anthropic-messages',
  // `ping` events while the model thinks (the Messages streaming reference).
  sendsWhileThinking: true,
  inspect(frame: SseFrame): FrameVerdict {
    const data = frame.data
    if (data === undefined) {
      // The SDK raises on `event: error` even without data.
      return frame.event === 'error'
        ? errorEventWithoutDetail
        : inspectWithoutData(frame, anthropicError)
    }
    // Cheap check before JSON.parse: a ping needs no parsing.
    if (frame.event === 'ping') return { kind: 'keepalive' }
    const body = parseData(data)
    if (body === undefined)
      return malformedFrame(`an Anthropic data frame is not a JSON object: ${data}`)
    const type = frame.event ?? stringField(body, 'type')
    if (type === undefined) return anthropicError(body) ?? { kind: 'meta' }
    // `message_start` reports input in its message, `message_delta` output at the top level.
    const reported = anthropicUsage(body.usage ?? field(body.message, 'usage'))
    return withUsage(inspectEvent(type, body), reported)
  },
  quickOutput(frame: SseFrame): boolean {
    return startsWith(frame.raw, deltaEvent) && endsWithObject(frame.raw)
  },
  renderError(error: RenderableError): Uint8Array {
    const { message } = renderable(error)
    return encode(event('error', { error: { type: anthropicErrorType(error), message } }))
  },
  renderErrorBody(error: RenderableError): string {
    const { message } = renderable(error)
    return JSON.stringify({ type: 'error', error: { type: anthropicErrorType(error), message } })
  },
  nonStreamingRequest: (request: UpstreamRequest): UpstreamRequest => ({
    url: request.url,
    body: { ...request.body, stream: false },
  }),
  credentialHeader: (secret: string): readonly [string, string] => ['x-api-key', secret],
  // The API refuses a request without it; 2023-06-01 is the version its SDKs send.
  requestHeaders: { 'anthropic-version': '2023-06-01' },
  invalidRequest: modelNamedInBody,
  matchesUrl: pathEndsWith('/messages'),
  isStreamingRequest: streamFlagInBody,
  fitOutputBudget: fitAnthropicBudget,
  renderFromMessage: anthropicFromMessage,
  usageOf: (message: unknown) => anthropicUsage(field(message, 'usage')),
  buildContinuation: anthropicContinuation,
  spliceContinuation: anthropicSplice,
  // The SDK's stream acts on these events only (a frame without `event:` is skipped).
  clientIgnores: (frame: SseFrame): boolean =>
    frame.event === undefined || !clientEvents.has(frame.event),
  renderStop(state: RenderState): Uint8Array {
    // Not for a headless stream: there a start would follow renderReasoningAsText's (which the
    // state cannot show, the first frame stays the first), or turn text the SDK ignored into an
    // empty answer reported as complete.
    let out = messageProgress(state) === 'none' ? messageStart(state) : ''
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
    let index = 0
    if (messageProgress(state) === 'started') {
      for (const open of state.openBlocks) out += event('content_block_stop', { index: open })
      index = state.lastBlockIndex + 1
    } else {
      // A new message: its blocks count from 0 (the SDK indexes its content by them), and
      // blocks opened before it belong to no message the client has.
      out += messageStart(state)
    }
    out += event('content_block_start', { index, content_block: { type: 'text', text: '' } })
    out += event('content_block_delta', {
      index,
      delta: { type: 'text_delta', text: state.reasoningText },
    })
    out += event('content_block_stop', { index })
    return encode(out)
  },
})
