import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { runs } from '../support/runs.js'
import { scriptedUpstream } from '../support/upstream.js'

/**
 * Guarantee 27, its second half: holding has no cliff. Before output the peek holds what it
 * cannot yet call output (preambles, lifecycle events, frames of kinds no adapter knows) up
 * to `maxPeekFrames` / `maxPeekBytes`; a live upstream past that bound is committed, never
 * answered 502 "the upstream sent too much before any output", and what it sent reaches the
 * client whole.
 */

const numRuns = runs(40)

/** Frames each protocol may send before output that are not keep-alives, and its keep-alive. */
const protocols: readonly {
  adapter: StreamAdapter
  frames: readonly string[]
  keepalive: string
}[] = [
  {
    adapter: openaiChat,
    frames: [
      'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
      'data: {"choices":[],"usage":null}\n\n',
      'data: {"choices":[{"index":0,"delta":{"content":[]},"finish_reason":null}]}\n\n',
    ],
    keepalive: ': OPENROUTER PROCESSING\n\n',
  },
  {
    adapter: openaiResponses,
    frames: [
      'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1,"response":{"id":"r"}}\n\n',
      'event: response.web_search_call.searching\ndata: {"type":"response.web_search_call.searching","sequence_number":2,"item_id":"ws","output_index":0}\n\n',
      'event: response.zz_new.in_progress\ndata: {"type":"response.zz_new.in_progress","sequence_number":3,"item_id":"x"}\n\n',
    ],
    keepalive: ': keep-alive\n\n',
  },
  {
    adapter: anthropicMessages,
    frames: [
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
      'event: zz_progress\ndata: {"type":"zz_progress","note":"searching"}\n\n',
      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}\n\n',
    ],
    keepalive: 'event: ping\ndata: {"type":"ping"}\n\n',
  },
  {
    adapter: geminiGenerateContent,
    frames: [
      'data: {"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"index":0}]}\n\n',
      'data: {"usageMetadata":{"promptTokenCount":3}}\n\n',
    ],
    keepalive: ': keep-alive\n\n',
  },
]

const text = {
  'openai-chat':
    'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
  'openai-responses':
    'event: response.completed\ndata: {"type":"response.completed","sequence_number":9,"response":{"id":"r","status":"completed","output":[]}}\n\n',
  'anthropic-messages':
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n',
  gemini:
    'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"}]},"finishReason":"STOP","index":0}]}\n\n',
} as Record<string, string>

describe('holding before output has no cliff', () => {
  it('a live upstream sending frames that are not keep-alives is never answered 502 for holding too much before output', async () => {
    // By name, so a counterexample prints a name rather than an adapter's functions.
    const byName = (name: string) =>
      protocols.find((p) => p.adapter.name === name) as (typeof protocols)[number]
    await fc.assert(
      fc.asyncProperty(
        fc
          .constantFrom(...protocols.map((p) => p.adapter.name))
          .chain((name) =>
            fc.tuple(
              fc.constant(name),
              fc.array(
                fc.oneof(
                  fc.constantFrom(...byName(name).frames),
                  fc.constant(byName(name).keepalive),
                ),
                { minLength: 1, maxLength: 60 },
              ),
            ),
          ),
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 64, max: 2048 }),
        async ([name, held], maxPeekFrames, maxPeekBytes) => {
          const chosen = byName(name)
          // At least one frame that is not a keep-alive, and enough to cross a bound.
          const before = [chosen.frames[0] as string, ...held, ...held, ...held]
          const body = before.join('') + (text[chosen.adapter.name] as string)
          const upstream = scriptedUpstream([{ steps: [{ bytes: body }] }])
          const sink = createRecordingSink()
          const outcome = await relay({
            sink,
            pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-a-0123456789abcdef' }]),
            adapter: chosen.adapter,
            attempt: upstream.attempt,
            policy: { maxAttempts: 1, peek: { maxPeekFrames, maxPeekBytes } },
          })
          expect(outcome).toMatchObject({ kind: 'committed', ok: true })
          expect(sink.status).toBe(200)
          expect(sink.text).toBe(body)
        },
      ),
      { numRuns },
    )
  })
})
