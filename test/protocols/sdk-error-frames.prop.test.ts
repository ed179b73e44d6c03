import { APIError as AnthropicAPIError } from '@anthropic-ai/sdk'
import { Stream as AnthropicStream } from '@anthropic-ai/sdk/streaming'
import fc from 'fast-check'
import { APIError as OpenAIAPIError } from 'openai'
import { Stream as OpenAIStream } from 'openai/streaming'
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
 * Where an error frame is, the official SDK decides: the `openai` stream raises `APIError` on
 * any data whose `error` is truthy (`if (data && data.error)`), in Chat and Responses alike;
 * `@anthropic-ai/sdk` on any `event: error`, whatever its data. An adapter that calls such a
 * frame anything else lets the relay commit to it, and the chaos judge call an answer silent
 * that the client saw fail.
 */

const numRuns = runs(100)

/** What the SDK's stream did with `text`: raised its `APIError`, raised something else, or not. */
async function sdkOn(
  sdk: 'openai' | 'anthropic',
  text: string,
): Promise<'api-error' | 'other-error' | 'read'> {
  const response = new Response(text, { headers: { 'content-type': 'text/event-stream' } })
  const controller = new AbortController()
  try {
    if (sdk === 'openai') {
      for await (const _ of OpenAIStream.fromSSEResponse(response, controller)) {
        // Reading is all.
      }
    } else {
      for await (const _ of AnthropicStream.fromSSEResponse(response, controller)) {
        // Reading is all.
      }
    }
    return 'read'
  } catch (error) {
    return error instanceof OpenAIAPIError || error instanceof AnthropicAPIError
      ? 'api-error'
      : 'other-error'
  }
}

async function kindsOf(adapter: StreamAdapter, text: string) {
  const frames = await readAll(createFrameReader(chunkSource([utf8(text)])))
  return frames.map((frame) => adapter.inspect(frame).kind)
}

const errorValue = fc.oneof(
  fc.constantFrom<unknown>('upstream failed', true, 1, '', 0, false, null, {}, [], 'x'),
  fc.jsonValue(),
)

describe('an adapter calls a frame an error exactly when the official SDK raises APIError on it', () => {
  it('openai-chat: a chunk, or a bare object, whose `error` is any JSON value', async () => {
    await fc.assert(
      fc.asyncProperty(errorValue, fc.boolean(), async (error, withChoices) => {
        const body = withChoices
          ? { choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }], error }
          : { error }
        const text = `data: ${JSON.stringify(body)}\n\n`
        const sdk = await sdkOn('openai', text)
        const [kind] = await kindsOf(openaiChat, text)
        expect({ sdk, error: kind === 'error' }).toEqual({ sdk, error: sdk === 'api-error' })
      }),
      { numRuns },
    )
  })

  it('openai-responses: a typed event, or a bare object, whose `error` is any JSON value', async () => {
    await fc.assert(
      fc.asyncProperty(errorValue, fc.boolean(), async (error, typed) => {
        const type = 'response.output_text.delta'
        const text = typed
          ? `event: ${type}\ndata: ${JSON.stringify({ type, delta: 'hi', error })}\n\n`
          : `data: ${JSON.stringify({ error })}\n\n`
        const sdk = await sdkOn('openai', text)
        const [kind] = await kindsOf(openaiResponses, text)
        expect({ sdk, error: kind === 'error' }).toEqual({ sdk, error: sdk === 'api-error' })
      }),
      { numRuns },
    )
  })

  it('anthropic-messages: `event: error` with any data, or none', async () => {
    const data = fc.oneof(
      fc.constant(undefined),
      fc.jsonValue().map((value) => JSON.stringify(value)),
      fc.string().filter((text) => !/[\r\n]/.test(text)),
    )
    await fc.assert(
      fc.asyncProperty(data, async (value) => {
        const text = value === undefined ? 'event: error\n\n' : `event: error\ndata: ${value}\n\n`
        const sdk = await sdkOn('anthropic', text)
        const [kind] = await kindsOf(anthropicMessages, text)
        expect({ sdk, kind }).toEqual({ sdk: 'api-error', kind: 'error' })
      }),
      { numRuns },
    )
  })

  it.each([
    ['{"error":"upstream failed"}', 'openai-chat'],
    ['{"error":true}', 'openai-chat'],
    ['{"error":"upstream failed"}', 'openai-responses'],
    ['{"error":true}', 'openai-responses'],
  ] as const)('data: %s is an error to the SDK and to %s', async (json, name) => {
    const adapter = name === 'openai-chat' ? openaiChat : openaiResponses
    const text = `data: ${json}\n\n`
    expect(await sdkOn('openai', text)).toBe('api-error')
    const [kind] = await kindsOf(adapter, text)
    expect(kind).toBe('error')
  })
})
