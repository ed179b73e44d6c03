/**
 * How an OpenAI Responses stream is written, one event family per function, so each can be
 * read against the spec: the response's lifecycle (`response.created`, `…in_progress`,
 * `…completed`), output items that stream text (a message's `output_text` part, a reasoning
 * summary's `summary_text` part), function calls, and errors. One state object carries the
 * sequence number, the current output index, the open item and the finished items.
 *
 * @module
 */

import { openaiErrorBody, sse, type WireWriter } from './wire-format.js'

type ItemKind = 'message' | 'reasoning'

/** What a Responses stream has written so far. */
interface ResponsesState {
  sequence: number
  item: number
  open: { kind: ItemKind; id: string; text: string } | undefined
  readonly output: Record<string, unknown>[]
}

function event(state: ResponsesState, type: string, body: Record<string, unknown>): string {
  return sse({ type, sequence_number: state.sequence++, ...body }, type)
}

/** The response object as the lifecycle events carry it. */
function responseObject(status: string, output: Record<string, unknown>[] = []) {
  return {
    id: 'resp_faulty',
    object: 'response',
    created_at: 1_764_000_000,
    status,
    model: 'faulty-model',
    output,
  }
}

const usage = { input_tokens: 10, output_tokens: 12, total_tokens: 22 }

/**
 * The names of a text-streaming item's events: a message streams `output_text` in a content
 * part, a reasoning item `summary_text` in a summary part.
 */
const itemEvents = {
  message: {
    prefix: 'msg',
    item: (id: string) => ({
      id,
      type: 'message',
      status: 'in_progress',
      role: 'assistant',
      content: [],
    }),
    part: (text: string) => ({ type: 'output_text', text, annotations: [] }),
    partAdded: 'response.content_part.added',
    delta: 'response.output_text.delta',
    textDone: 'response.output_text.done',
    partDone: 'response.content_part.done',
    index: 'content_index',
    done: (id: string, part: unknown) => ({
      id,
      type: 'message',
      status: 'completed',
      role: 'assistant',
      content: [part],
    }),
  },
  reasoning: {
    prefix: 'rs',
    item: (id: string) => ({ id, type: 'reasoning', summary: [] }),
    part: (text: string) => ({ type: 'summary_text', text }),
    partAdded: 'response.reasoning_summary_part.added',
    delta: 'response.reasoning_summary_text.delta',
    textDone: 'response.reasoning_summary_text.done',
    partDone: 'response.reasoning_summary_part.done',
    index: 'summary_index',
    done: (id: string, part: unknown) => ({ id, type: 'reasoning', summary: [part] }),
  },
} as const

/** Closes the open item, if any: its text done, its part done, the item done. */
function closeItem(state: ResponsesState): string[] {
  const open = state.open
  if (open === undefined) return []
  state.open = undefined
  const names = itemEvents[open.kind]
  const part = names.part(open.text)
  const done = names.done(open.id, part)
  state.output.push(done)
  const at = { item_id: open.id, output_index: state.item, [names.index]: 0 }
  return [
    event(state, names.textDone, { ...at, text: open.text }),
    event(state, names.partDone, { ...at, part }),
    event(state, 'response.output_item.done', { output_index: state.item, item: done }),
  ]
}

/** Opens an item of `kind` unless one is open already: the item, then its empty part. */
function openItem(state: ResponsesState, kind: ItemKind): string[] {
  if (state.open?.kind === kind) return []
  const frames = closeItem(state)
  state.item++
  const names = itemEvents[kind]
  const id = `${names.prefix}_${state.item}`
  state.open = { kind, id, text: '' }
  return [
    ...frames,
    event(state, 'response.output_item.added', { output_index: state.item, item: names.item(id) }),
    event(state, names.partAdded, {
      item_id: id,
      output_index: state.item,
      [names.index]: 0,
      part: names.part(''),
    }),
  ]
}

/** A text or reasoning delta, opening its item first when needed. */
function delta(state: ResponsesState, kind: ItemKind, text: string): string[] {
  const frames = openItem(state, kind)
  const open = state.open as { id: string; text: string }
  open.text += text
  const names = itemEvents[kind]
  return [
    ...frames,
    event(state, names.delta, {
      item_id: open.id,
      output_index: state.item,
      [names.index]: 0,
      delta: text,
    }),
  ]
}

/** A whole function call: the item, its argument deltas, their end and the item's. */
function functionCall(state: ResponsesState, name: string, fragments: readonly string[]) {
  const frames = closeItem(state)
  const at = ++state.item
  const id = `fc_${at}`
  const base = { id, type: 'function_call', name, call_id: `call_${at}` }
  const done = { ...base, status: 'completed', arguments: fragments.join('') }
  state.output.push(done)
  return [
    ...frames,
    event(state, 'response.output_item.added', {
      output_index: at,
      item: { ...base, status: 'in_progress', arguments: '' },
    }),
    ...fragments.map((fragment) =>
      event(state, 'response.function_call_arguments.delta', {
        item_id: id,
        output_index: at,
        delta: fragment,
      }),
    ),
    event(state, 'response.function_call_arguments.done', {
      item_id: id,
      output_index: at,
      arguments: done.arguments,
    }),
    event(state, 'response.output_item.done', { output_index: at, item: done }),
  ]
}

/** An `error` event, with its fields at the top (as the API sends) and under `error`. */
function errorEvent(state: ResponsesState, retryable: boolean, message: string): string {
  const type = retryable ? 'server_error' : 'invalid_request_error'
  return event(state, 'error', {
    code: type,
    message,
    param: null,
    error: { type, code: type, message },
  })
}

/** A writer of one OpenAI Responses answer. */
export function responsesWriter(): WireWriter {
  const state: ResponsesState = { sequence: 0, item: -1, open: undefined, output: [] }
  return {
    start: () => [
      event(state, 'response.created', { response: responseObject('in_progress') }),
      event(state, 'response.in_progress', { response: responseObject('in_progress') }),
    ],
    text: (text) => delta(state, 'message', text),
    reasoning: (text) => delta(state, 'reasoning', text),
    tool: (name, fragments) => functionCall(state, name, fragments),
    finish: () => [
      ...closeItem(state),
      event(state, 'response.completed', {
        response: { ...responseObject('completed', state.output), usage },
      }),
    ],
    error: (retryable, message) => errorEvent(state, retryable, message),
    errorBody: openaiErrorBody,
    keepalive: () => ': keep-alive\n\n',
    rateLimitType: 'rate_limit_error',
    overloadType: 'overloaded_error',
    invalidRequestType: 'invalid_request_error',
    message: (text) => ({
      ...responseObject('completed', [
        {
          id: 'msg_0',
          type: 'message',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text, annotations: [] }],
        },
      ]),
      usage,
    }),
    overflowMessage: (input, output, limit) =>
      `This model's maximum context length is ${limit} tokens. However, you requested ${input + output} tokens (${input} in the messages, ${output} in the completion). Please reduce the length of the messages or completion.`,
  }
}
