/**
 * Continuing a cut answer (guarantee 20 in docs/guarantees.md): what an adapter is told of the text the client
 * already got, the splice that turns a continuation's frames into frames of the client's
 * stream, and the helpers the shipped adapters share for both.
 *
 * @module
 */

import { Frame, type SseFrame } from '../sse/frame.js'
import { encode, field } from './common.js'
import type { UpstreamRequest } from './types.js'

/** A frame of the library's own making, from its text. */
export function frameOf(text: string): SseFrame {
  return new Frame(encode(text), true, 0)
}

/**
 * The text the client got that a continuation's model will write again: a prefill sent
 * without it (`sent` is a prefix of `received`) is answered by text that starts with it. It
 * is skipped, character by character, while the continuation repeats it; from the first
 * character that differs everything is kept (nothing the model wrote is dropped).
 */
export function overlapSkipper(received: string, sent: string): (text: string) => string {
  let pending = received.slice(sent.length)
  return (text) => {
    if (pending === '' || text === '') return text
    let same = 0
    while (same < text.length && same < pending.length && text[same] === pending[same]) same++
    if (same === text.length) {
      pending = pending.slice(same)
      return ''
    }
    // The continuation left the overlap here: nothing more is skipped.
    const kept = text.slice(same)
    pending = ''
    return kept
  }
}

/** The messages of a chat-shaped request body, or `undefined` when it has none. */
function messagesOf(request: UpstreamRequest): readonly unknown[] | undefined {
  const messages = request.body.messages
  return Array.isArray(messages) ? messages : undefined
}

/**
 * The text of an assistant message's `content`: a string, or text blocks only; `undefined`
 * for anything else (an image, a tool call: not a prefix a continuation can extend).
 */
function assistantText(content: unknown): string | undefined {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return undefined
  let text = ''
  for (const block of content) {
    if (field(block, 'type') !== 'text') return undefined
    const part = field(block, 'text')
    if (typeof part !== 'string') return undefined
    text += part
  }
  return text
}

/**
 * The request's messages with `text` as the final assistant message: appended to one the
 * host already ended with (its own prefill), else added. `undefined` when unsound.
 */
export function withFinalAssistant(
  request: UpstreamRequest,
  text: string,
  extra: Readonly<Record<string, unknown>> = {},
): unknown[] | undefined {
  const messages = messagesOf(request)
  if (messages === undefined || messages.length === 0) return undefined
  const last = messages[messages.length - 1]
  if (field(last, 'role') === 'assistant') {
    const before = assistantText(field(last, 'content'))
    if (before === undefined) return undefined
    return [
      ...messages.slice(0, -1),
      { ...(last as object), role: 'assistant', content: before + text, ...extra },
    ]
  }
  return [...messages, { role: 'assistant', content: text, ...extra }]
}
