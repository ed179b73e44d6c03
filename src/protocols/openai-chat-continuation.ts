/**
 * OpenAI Chat continuation, for the OpenAI-compatible servers that accept a final assistant
 * message as the prefix of the answer: DeepSeek and Mistral (`prefix: true` on it), vLLM
 * (`continue_final_message: true` with `add_generation_prompt: false`). OpenAI's own API
 * does not: there the adapter is made without a dialect and a cut is told.
 *
 * @module
 */

import { rejectUnknownKeys } from '../options.js'
import { field, parseObject, sseFrameText } from './common.js'
import { frameOf, overlapSkipper, withFinalAssistant } from './continuation.js'
import type {
  ContinuationReceived,
  ContinuationSplice,
  RenderState,
  StreamAdapter,
  UpstreamRequest,
} from './types.js'

/**
 * How an OpenAI-compatible server continues a final assistant message:
 * `deepseek-prefix` (DeepSeek's beta endpoint, `prefix: true`), `mistral-prefix`
 * (`prefix: true`), `vllm-continue` (`continue_final_message: true`,
 * `add_generation_prompt: false`).
 *
 * @group Protocols
 */
export type OpenAIChatContinuation = 'deepseek-prefix' | 'mistral-prefix' | 'vllm-continue'

/**
 * Options of {@link openaiChatWith}.
 *
 * @group Protocols
 */
export interface OpenAIChatOptions {
  /**
   * The server's continuation dialect: turns on `continueAfterCut` for this upstream. Name it
   * only for a server that documents it (OpenAI's own API has none).
   * @default undefined (no continuation: a cut ends with the honest error)
   * @example openaiChatWith({ continuation: 'deepseek-prefix' })
   */
  readonly continuation?: OpenAIChatContinuation | undefined
}

const dialects: readonly OpenAIChatContinuation[] = [
  'deepseek-prefix',
  'mistral-prefix',
  'vllm-continue',
]

/** The continuation request of a dialect; `null` for several choices (`n` above 1). */
function chatContinuation(dialect: OpenAIChatContinuation) {
  return (request: UpstreamRequest, received: ContinuationReceived): UpstreamRequest | null => {
    const n = request.body.n
    if (n !== undefined && n !== 1) return null
    if (received.text === '') return null
    if (dialect === 'vllm-continue') {
      const messages = withFinalAssistant(request, received.text)
      if (messages === undefined) return null
      return {
        url: request.url,
        body: {
          ...request.body,
          messages,
          continue_final_message: true,
          add_generation_prompt: false,
        },
      }
    }
    const messages = withFinalAssistant(request, received.text, { prefix: true })
    return messages === undefined ? null : { url: request.url, body: { ...request.body, messages } }
  }
}

/**
 * The splice of one Chat continuation: every chunk takes the client's `id` and `created`,
 * the role chunk and any chunk left with nothing are dropped, `[DONE]` and errors pass.
 */
function chatSplice(received: ContinuationReceived, client: RenderState): ContinuationSplice {
  const skip = overlapSkipper(received.text, received.text)
  const first = client.firstData === undefined ? undefined : parseObject(client.firstData)
  const id = field(first, 'id')
  const created = field(first, 'created')
  return (frame) => {
    const data = frame.data
    const body = data === undefined ? undefined : parseObject(data)
    if (body === undefined || body.error !== undefined || !Array.isArray(body.choices)) {
      return [frame]
    }
    let empty = body.usage === undefined || body.usage === null
    const choices = body.choices.map((choice: unknown) => {
      const {
        role: _role,
        content,
        ...rest
      } = (field(choice, 'delta') ?? {}) as Record<string, unknown>
      const text = typeof content === 'string' ? skip(content) : undefined
      const delta = text === undefined || text === '' ? rest : { ...rest, content: text }
      const finish = field(choice, 'finish_reason')
      if (Object.keys(delta).length > 0 || (finish !== null && finish !== undefined)) empty = false
      return { ...(choice as object), delta }
    })
    if (empty) return []
    const out = {
      ...body,
      ...(id === undefined ? {} : { id }),
      ...(created === undefined ? {} : { created }),
      choices,
    }
    return [frameOf(sseFrameText(JSON.stringify(out), frame.event))]
  }
}

/** `base` (the Chat adapter) with `options` applied; see `openaiChatWith`. */
export function chatWithOptions(base: StreamAdapter, options: OpenAIChatOptions): StreamAdapter {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`openaiChatWith takes an options object, got ${String(options)}`)
  }
  rejectUnknownKeys('openaiChatWith', options, ['continuation'])
  const dialect = options.continuation
  if (dialect === undefined) return base
  if (!dialects.includes(dialect)) {
    throw new RangeError(
      `continuation must be one of ${dialects.map((each) => `'${each}'`).join(', ')}, got ${String(dialect)}`,
    )
  }
  return Object.freeze({
    ...base,
    buildContinuation: chatContinuation(dialect),
    spliceContinuation: chatSplice,
  })
}
