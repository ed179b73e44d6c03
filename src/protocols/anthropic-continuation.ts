/**
 * Anthropic Messages continuation: a prefilled final assistant message asks for the rest of
 * a cut answer, and the continuation's events are spliced into the client's message.
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'
import { field, parseObject, sseFrameText, stringField } from './common.js'
import {
  type ContinuationReceived,
  type ContinuationSplice,
  frameOf,
  overlapSkipper,
  withFinalAssistant,
} from './continuation.js'
import type { RenderState, UpstreamRequest } from './types.js'

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
 * `message_delta` and `message_stop` end the client's message.
 */
export function anthropicSplice(
  received: ContinuationReceived,
  client: RenderState,
): ContinuationSplice {
  const skip = overlapSkipper(received.text, prefillOf(received))
  const open = client.openBlocks.at(-1)
  /** Continuation index + shift = the client's index; set at the continuation's first block. */
  let shift: number | undefined
  const shifted = (index: unknown) => (typeof index === 'number' ? index : 0) + (shift ?? 0)
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
    if (type === 'content_block_start') {
      const text = stringField(body.content_block, 'type') === 'text'
      if (shift === undefined) {
        if (open !== undefined && text) {
          shift = open - (typeof body.index === 'number' ? body.index : 0)
          return []
        }
        const next = open === undefined ? client.lastBlockIndex + 1 : open + 1
        shift = next - (typeof body.index === 'number' ? body.index : 0)
        const start = event(type, { ...body, index: shifted(body.index) })
        return open === undefined ? [start] : [event('content_block_stop', { index: open }), start]
      }
      return [event(type, { ...body, index: shifted(body.index) })]
    }
    // A delta before any block start continues the open block.
    if (shift === undefined && open !== undefined) shift = open
    if (type === 'content_block_stop') return [event(type, { ...body, index: shifted(body.index) })]
    const delta = body.delta
    if (stringField(delta, 'type') === 'text_delta') {
      const text = skip(stringField(delta, 'text') ?? '')
      if (text === '') return []
      return [
        event(type, {
          ...body,
          index: shifted(body.index),
          delta: { ...(delta as object), text },
        }),
      ]
    }
    return [event(type, { ...body, index: shifted(body.index), delta: field(body, 'delta') })]
  }
}
