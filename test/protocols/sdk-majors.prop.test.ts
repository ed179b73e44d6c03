import { APIError as AnthropicAPIError } from '@anthropic-ai/sdk'
import { Stream as AnthropicStream } from '@anthropic-ai/sdk/streaming'
import { APIError as AnthropicNextAPIError } from 'anthropic-next'
import { Stream as AnthropicNextStream } from 'anthropic-next/streaming'
import fc from 'fast-check'
import { APIError as OpenAIAPIError } from 'openai'
import { Stream as OpenAIStream } from 'openai/streaming'
import { APIError as OpenAINextAPIError } from 'openai-next'
import { Stream as OpenAINextStream } from 'openai-next/streaming'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createFrameReader,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll, utf8 } from '../support/sources.js'

/**
 * The pinned SDK majors and the newest (`openai` 6.x and 7.x, `@anthropic-ai/sdk` pinned and
 * newest, installed as `openai-next` / `anthropic-next`) read some frames differently: 7.x
 * ends only at exactly `[DONE]` and raises on `[DONE]x`, and raises on any named `event:
 * error`. Where they differ the adapter takes the reading that never lets any of them see a
 * silent success: whatever one major raises on is an error, and what the adapter calls a
 * clean end no major raises on.
 */

const numRuns = runs(150)

interface StreamClass {
  fromSSEResponse(response: Response, controller: AbortController): AsyncIterable<unknown>
}

const sdks = {
  'openai 6.x': { stream: OpenAIStream as unknown as StreamClass, api: OpenAIAPIError },
  'openai 7.x': { stream: OpenAINextStream as unknown as StreamClass, api: OpenAINextAPIError },
  'anthropic pinned': {
    stream: AnthropicStream as unknown as StreamClass,
    api: AnthropicAPIError,
  },
  'anthropic newest': {
    stream: AnthropicNextStream as unknown as StreamClass,
    api: AnthropicNextAPIError,
  },
} as const
type Sdk = keyof typeof sdks

/** Whether the SDK's stream raised reading `text` (its `APIError`, or a `SyntaxError`). */
async function raises(sdk: Sdk, text: string): Promise<boolean> {
  const response = new Response(text, { headers: { 'content-type': 'text/event-stream' } })
  const silenced = console.error
  console.error = () => {}
  try {
    for await (const _ of sdks[sdk].stream.fromSSEResponse(response, new AbortController())) {
      // Reading is all.
    }
    return false
  } catch {
    return true
  } finally {
    console.error = silenced
  }
}

async function kindsOf(adapter: StreamAdapter, text: string) {
  const frames = await readAll(createFrameReader(chunkSource([utf8(text)])))
  return frames.map((frame) => adapter.inspect(frame).kind)
}

const event = fc.oneof(
  fc.constant(undefined),
  fc.constantFrom('error', 'ping', 'message', 'response.output_text.delta', 'content_block_delta'),
)
const data = fc.oneof(
  fc.constant(undefined),
  fc.constantFrom('[DONE]', '[DONE]x', '[DONE] ', '[DONE]{}', 'not json', ''),
  fc.constantFrom(
    '{"message":"Provider failed","code":"provider_error","type":"server_error"}',
    '{"error":{"message":"Overloaded","type":"server_error"}}',
    '{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}',
    '{"type":"response.output_text.delta","delta":"Hi"}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}',
  ),
  fc.jsonValue({ maxDepth: 2 }).map((value) => JSON.stringify(value)),
)
const frameText = fc
  .tuple(event, data)
  .filter(([name, value]) => name !== undefined || value !== undefined)
  .map(([name, value]) => {
    const lines = [
      ...(name === undefined ? [] : [`event: ${name}`]),
      ...(value === undefined ? [] : [`data: ${value}`]),
    ]
    return `${lines.join('\n')}\n\n`
  })

const adapters: Readonly<Record<string, StreamAdapter>> = {
  'openai-chat': openaiChat,
  'openai-responses': openaiResponses,
  'anthropic-messages': anthropicMessages,
}
const cases: readonly [string, readonly Sdk[]][] = [
  ['openai-chat', ['openai 6.x', 'openai 7.x']],
  ['openai-responses', ['openai 6.x', 'openai 7.x']],
  ['anthropic-messages', ['anthropic pinned', 'anthropic newest']],
]

describe('the adapters read the pinned and the newest SDK majors so that none sees a silent success', () => {
  it.each(cases)(
    '%s: a frame any major raises on is an error, and a frame called a terminal none raises on',
    async (name, majors) => {
      const adapter = adapters[name] as StreamAdapter
      await fc.assert(
        fc.asyncProperty(frameText, async (text) => {
          const [kind] = await kindsOf(adapter, text)
          const raised = await Promise.all(majors.map((sdk) => raises(sdk, text)))
          if (raised.some(Boolean)) expect({ text, kind }).toEqual({ text, kind: 'error' })
          if (kind === 'terminal')
            expect({ text, raised }).toEqual({ text, raised: [false, false] })
        }),
        { numRuns },
      )
    },
  )

  it.each([
    ['event: error\ndata: {"message":"boom","code":"provider_error","type":"server_error"}\n\n'],
    ['data: [DONE]x\n\n'],
    ['event: ping\n\n'],
  ])('openai 7.x raises on %j, and the Chat adapter calls it an error', async (text) => {
    expect(await raises('openai 7.x', text)).toBe(true)
    expect(await kindsOf(openaiChat, text)).toEqual(['error'])
  })

  it('openai 7.x ends cleanly at exactly [DONE], as the adapter says', async () => {
    const text = 'data: {"choices":[]}\n\ndata: [DONE]\n\ndata: {"error":"after"}\n\n'
    expect(await raises('openai 7.x', text)).toBe(false)
    expect(await raises('openai 6.x', text)).toBe(false)
    expect((await kindsOf(openaiChat, text))[1]).toBe('terminal')
  })
})
