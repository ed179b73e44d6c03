/**
 * Anthropic Messages continuation: a prefilled final assistant message asks for the rest of
 * a cut answer, and the continuation's events are spliced into the client's message.
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'
import { field, parseObject, sseFrameText, stringField } from './common.js'
import { frameOf, overlapSkipper, withFinalAssistant } from './continuation.js'
import type {
  ContinuationReceived,
  ContinuationSplice,
  RenderState,
  UpstreamRequest,
} from './types.js'

/**
 * The received text as it can be prefilled: Anthropic rejects a final assistant message that
 * ends in whitespace, so it is trimmed (the model writes it again, and the splice skips it).
 */
function prefillOf(received: ContinuationReceived): string {
  return received.text.trimEnd()
}

/**
 * The request for the rest of an Anthropic answer: the received text as the final assistant
 * message. `null` with extended thinking (Anthropic refuses a prefill then) or when nothing
 * but whitespace was received.
 */
export function anthropicContinuation(
  request: UpstreamRequest,
  received: ContinuationReceived,
): UpstreamRequest | null {
  const thinking = stringField(request.body.thinking, 'type')
  if (thinking !== undefined && thinking !== 'disabled') return null
  const prefill = prefillOf(received)
  if (prefill === '') return null
  const messages = withFinalAssistant(request, prefill)
  if (messages === undefined) return null
  return { url: request.url, body: { ...request.body, messages } }
}

function event(type: string, body: Record<string, unknown>): SseFrame {
  return frameOf(sseFrameText(JSON.stringify({ ...body, type }), type))
}

/**
 * The splice of one Anthropic continuation: its `message_start` is dropped; its first text
 * block continues the client's open block (its start dropped, its deltas re-indexed, the
 * regenerated whitespace skipped); later blocks follow the client's last index; its
 * `message_delta` and `message_stop` end the client's message. When the client's block had
 * already closed, the continuation's first text block opens a block only once it has a
 * character to show: a block of skipped whitespace alone is dropped, never left empty.
 */
export function anthropicSplice(
  received: ContinuationReceived,
  client: RenderState,
): ContinuationSplice {
  const skip = overlapSkipper(received.text, prefillOf(received))
  const open = client.openBlocks.at(-1)
  /** The client's index for the continuation's next new block. */
  let next = (open ?? client.lastBlockIndex) + 1
  /** The continuation's block indexes, as the client's. */
  const indexes = new Map<number, number>()
  let started = false
  /** The first text block after a closed one: its start waits for a character to show. */
  let waiting: { index: number; start: Record<string, unknown> } | undefined
  const clientIndex = (index: number): number => {
    let at = indexes.get(index)
    if (at === undefined) {
      at = next++
      indexes.set(index, at)
    }
    return at
  }
  /** The waiting block's start, when `index` is the waiting block (its first shown delta). */
  const opened = (index: number): SseFrame[] => {
    if (waiting?.index !== index) return []
    const { start } = waiting
    waiting = undefined
    return [event('content_block_start', { ...start, index: clientIndex(index) })]
  }
  return (frame) => {
    const type = frame.event
    if (type === 'message_start') return []
    if (
      type !== 'content_block_start' &&
      type !== 'content_block_delta' &&
      type !== 'content_block_stop'
    ) {
      return [frame]
    }
    const data = frame.data
    const body = data === undefined ? undefined : parseObject(data)
    if (body === undefined) return [frame]
    const index = typeof body.index === 'number' ? body.index : 0
    if (type === 'content_block_start') {
      const text = stringField(body.content_block, 'type') === 'text'
      if (!started) {
        started = true
        if (text && open !== undefined) {
          indexes.set(index, open)
          return []
        }
        if (text) {
          waiting = { index, start: body }
          return []
        }
        const start = event(type, { ...body, index: clientIndex(index) })
        return open === undefined ? [start] : [event('content_block_stop', { index: open }), start]
      }
      return [event(type, { ...body, index: clientIndex(index) })]
    }
    // A delta before any block start continues the open block.
    if (!started && open !== undefined) indexes.set(index, open)
    started = true
    if (type === 'content_block_stop') {
      if (waiting?.index === index) {
        // Nothing of it was shown: no block at all.
        waiting = undefined
        return []
      }
      return [event(type, { ...body, index: clientIndex(index) })]
    }
    const delta = body.delta
    if (stringField(delta, 'type') === 'text_delta') {
      const text = skip(stringField(delta, 'text') ?? '')
      if (text === '') return []
      return [
        ...opened(index),
        event(type, { ...body, index: clientIndex(index), delta: { ...(delta as object), text } }),
      ]
    }
    return [
      ...opened(index),
      event(type, { ...body, index: clientIndex(index), delta: field(body, 'delta') }),
    ]
  }
}
