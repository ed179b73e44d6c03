/**
 * How each shipped protocol writes the frames of an answer. A writer is stateful (it opens
 * and closes content blocks as Anthropic and Responses need); shared by the fault-injecting
 * upstream and the protocol stream arbitraries.
 *
 * @module
 */

import { anthropicMessages } from '../protocols/anthropic-messages.js'
import { geminiGenerateContent } from '../protocols/gemini.js'
import { openaiChat } from '../protocols/openai-chat.js'
import { openaiResponses } from '../protocols/openai-responses.js'
import type { StreamAdapter } from '../protocols/types.js'
import { responsesWriter } from './responses-wire.js'
import { openaiErrorBody, sse, type WireWriter } from './wire-format.js'

function chatWriter(): WireWriter {
  let toolIndex = 0
  const chunk = (delta: unknown, finish: string | null = null) =>
    sse({
      id: 'chatcmpl-faulty',
      object: 'chat.completion.chunk',
      created: 1_764_000_000,
      model: 'faulty-model',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    })
  return {
    start: () => [chunk({ role: 'assistant', content: '' })],
    text: (delta) => [chunk({ content: delta })],
    reasoning: (delta) => [chunk({ reasoning_content: delta })],
    tool: (name, fragments) => {
      const index = toolIndex++
      const id = `call_${index}`
      return [
        chunk({ tool_calls: [{ index, id, type: 'function', function: { name, arguments: '' } }] }),
        ...fragments.map((fragment) =>
          chunk({ tool_calls: [{ index, function: { arguments: fragment } }] }),
        ),
      ]
    },
    // The usage chunk, as OpenAI sends it to a request with `stream_options.include_usage`.
    finish: (reason) => [
      chunk({}, reason === 'tool_use' ? 'tool_calls' : 'stop'),
      sse({
        id: 'chatcmpl-faulty',
        object: 'chat.completion.chunk',
        created: 1_764_000_000,
        model: 'faulty-model',
        choices: [],
        usage: { prompt_tokens: 10, completion_tokens: 12, total_tokens: 22 },
      }),
      sse('[DONE]'),
    ],
    error: (retryable, message) =>
      sse({
        error: {
          message,
          type: retryable ? 'server_error' : 'invalid_request_error',
          param: null,
          code: null,
        },
      }),
    errorBody: openaiErrorBody,
    keepalive: () => ': keep-alive\n\n',
    rateLimitType: 'rate_limit_error',
    overloadType: 'overloaded_error',
    invalidRequestType: 'invalid_request_error',
    message: (text) => ({
      id: 'chatcmpl-faulty',
      object: 'chat.completion',
      created: 1_764_000_000,
      model: 'faulty-model',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: text, refusal: null },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: { prompt_tokens: 10, completion_tokens: 12, total_tokens: 22 },
    }),
    overflowMessage: (input, output, limit) =>
      `This model's maximum context length is ${limit} tokens. However, you requested ${input + output} tokens (${input} in the messages, ${output} in the completion). Please reduce the length of the messages or completion.`,
  }
}

function anthropicWriter(): WireWriter {
  let index = -1
  let open: 'text' | 'thinking' | undefined
  const event = (type: string, body: Record<string, unknown>) => sse({ type, ...body }, type)
  const openBlock = (kind: 'text' | 'thinking'): string[] => {
    if (open === kind) return []
    const frames = open === undefined ? [] : [event('content_block_stop', { index })]
    index++
    open = kind
    const block =
      kind === 'text'
        ? { type: 'text', text: '' }
        : { type: 'thinking', thinking: '', signature: '' }
    return [...frames, event('content_block_start', { index, content_block: block })]
  }
  const close = (): string[] => {
    if (open === undefined) return []
    open = undefined
    return [event('content_block_stop', { index })]
  }
  return {
    start: () => [
      event('message_start', {
        message: {
          id: 'msg_faulty',
          type: 'message',
          role: 'assistant',
          content: [],
          model: 'faulty-model',
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 10, output_tokens: 1 },
        },
      }),
    ],
    text: (delta) => [
      ...openBlock('text'),
      event('content_block_delta', { index, delta: { type: 'text_delta', text: delta } }),
    ],
    reasoning: (delta) => [
      ...openBlock('thinking'),
      event('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: delta } }),
    ],
    tool: (name, fragments) => {
      const frames = close()
      index++
      const at = index
      return [
        ...frames,
        event('content_block_start', {
          index: at,
          content_block: { type: 'tool_use', id: `toolu_${at}`, name, input: {} },
        }),
        ...fragments.map((fragment) =>
          event('content_block_delta', {
            index: at,
            delta: { type: 'input_json_delta', partial_json: fragment },
          }),
        ),
        event('content_block_stop', { index: at }),
      ]
    },
    finish: (reason) => [
      ...close(),
      event('message_delta', {
        delta: {
          stop_reason: reason === 'tool_use' ? 'tool_use' : 'end_turn',
          stop_sequence: null,
        },
        usage: { output_tokens: 12 },
      }),
      event('message_stop', {}),
    ],
    error: (retryable, message) =>
      event('error', {
        error: { type: retryable ? 'overloaded_error' : 'invalid_request_error', message },
      }),
    errorBody: (type, message) => JSON.stringify({ type: 'error', error: { type, message } }),
    keepalive: () => sse({ type: 'ping' }, 'ping'),
    rateLimitType: 'rate_limit_error',
    overloadType: 'overloaded_error',
    invalidRequestType: 'invalid_request_error',
    message: (text) => ({
      id: 'msg_faulty',
      type: 'message',
      role: 'assistant',
      model: 'faulty-model',
      content: [{ type: 'text', text }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 12 },
    }),
    overflowMessage: (input, output, limit) =>
      `input length and \`max_tokens\` exceed context limit: ${input} + ${output} > ${limit}, decrease input length or \`max_tokens\` and try again`,
  }
}

function geminiWriter(): WireWriter {
  const chunk = (parts: unknown[], finishReason?: string, usageMetadata?: object) =>
    sse({
      candidates: [
        {
          content: { parts, role: 'model' },
          index: 0,
          ...(finishReason === undefined ? {} : { finishReason }),
        },
      ],
      ...(usageMetadata === undefined ? {} : { usageMetadata }),
      modelVersion: 'faulty-model',
    })
  const usageMetadata = { promptTokenCount: 10, candidatesTokenCount: 12, totalTokenCount: 22 }
  return {
    start: () => [],
    text: (delta) => [chunk([{ text: delta }])],
    reasoning: (delta) => [chunk([{ text: delta, thought: true }])],
    tool: (name, fragments) => [
      chunk([{ functionCall: { name, args: { fragments: fragments.join('') } } }]),
    ],
    finish: () => [chunk([{ text: '' }], 'STOP', usageMetadata)],
    error: (retryable, message) =>
      sse({
        error: retryable
          ? { code: 503, message, status: 'UNAVAILABLE' }
          : { code: 400, message, status: 'INVALID_ARGUMENT' },
      }),
    errorBody: (type, message, status) =>
      JSON.stringify({ error: { code: status, message, status: type } }),
    keepalive: () => ': keep-alive\n\n',
    rateLimitType: 'RESOURCE_EXHAUSTED',
    overloadType: 'UNAVAILABLE',
    invalidRequestType: 'INVALID_ARGUMENT',
    message: (text) => ({
      candidates: [
        { content: { parts: [{ text }], role: 'model' }, finishReason: 'STOP', index: 0 },
      ],
      usageMetadata,
      modelVersion: 'faulty-model',
    }),
    overflowMessage: (input, output, limit) =>
      `The input token count (${input}) plus the maximum output tokens (${output}) exceeds the maximum number of tokens allowed (${limit}).`,
  }
}

// Keyed by the adapter object, not its name: a custom adapter that borrows a shipped name
// must not silently get a writer for a protocol it may not speak.
const writers: ReadonlyMap<StreamAdapter, () => WireWriter> = new Map([
  [openaiChat, chatWriter],
  [openaiResponses, responsesWriter],
  [anthropicMessages, anthropicWriter],
  [geminiGenerateContent, geminiWriter],
])

/**
 * The same writers by the shipped adapters' names: a runtime that loads this entry's copy of
 * the root apart from the caller's (Bun, resolving the package's self-reference) hands in an
 * equal adapter that is not the same object. Only the four shipped names match.
 */
const writersByName: ReadonlyMap<string, () => WireWriter> = new Map(
  [...writers].map(([adapter, writer]) => [adapter.name, writer]),
)

/**
 * A fresh frame writer for a shipped adapter, the one the faulty upstream and
 * `arbitraries.protocolStream` write with: use it to script a fake upstream's answer in the
 * adapter's own protocol.
 *
 * @throws {TypeError} for any adapter other than the four shipped ones (`openaiChat`,
 *   `openaiResponses`, `anthropicMessages`, `geminiGenerateContent`, or another copy of one
 *   of them under its own name): a custom adapter never gets another protocol's writer.
 *
 * @example
 * const wire = wireFor(anthropicMessages)
 * const body = [...wire.start(), ...wire.text('hi'), ...wire.finish('stop')].join('')
 *
 * @group Test doubles
 */
export function wireFor(adapter: StreamAdapter): WireWriter {
  const writer = writers.get(adapter) ?? writersByName.get(adapter.name)
  if (writer === undefined) {
    throw new TypeError(
      `wireFor: adapter "${adapter.name}" is not a shipped adapter; pass openaiChat, openaiResponses, anthropicMessages or geminiGenerateContent`,
    )
  }
  return writer()
}
