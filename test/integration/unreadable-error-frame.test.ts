/**
 * After output, an upstream error frame whose data its protocol's clients cannot read (not
 * JSON: the openai SDK throws a SyntaxError) ends with the protocol's own error frame: each
 * official SDK raises its API error, after the text it already had.
 */
import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import { GoogleGenAI } from '@google/genai'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { anthropicDownstream } from '../../examples/anthropic-over-openai-gateway.js'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  type DownstreamOptions,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  relay,
  type StreamAdapter,
} from '../../src/index.js'
import { nodeSink, serveFetch } from '../../src/node.js'
import { wireFor } from '../../src/testing/wire.js'
import { useLoopback, withBody } from '../support/loopback.js'

const { listen, cleanup } = useLoopback()

const secret = 'sk-unreadable-0123456789abcdef'
const keys = [{ id: 'a', secret }]

const unreadable = {
  'event: error with text data': 'event: error\ndata: upstream exploded\n\n',
  'a proxy page as data': 'data: <html><title>502 Bad Gateway</title></html>\n\n',
} as const

/** Output, then the unreadable frame (in the same chunk as the output, or in its own), then EOF. */
function upstreamParts(adapter: StreamAdapter, bad: string, ownChunk: boolean): string[] {
  const w = wireFor(adapter)
  const output = [...w.start(), ...w.text('Hello'), ...w.text(' world')].join('')
  return ownChunk ? [output, bad] : [output + bad]
}

function upstreamFetch(parts: readonly string[]): typeof fetch {
  return async () => {
    const queue = [...parts]
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const part = queue.shift()
        if (part === undefined) controller.close()
        else controller.enqueue(new TextEncoder().encode(part))
      },
    })
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
  }
}

/** A node:http gateway: relay() into nodeSink, translating with `downstream` when given. */
async function gateway(
  upstream: StreamAdapter,
  downstream: DownstreamOptions | undefined,
  parts: readonly string[],
) {
  const server = createServer((req, res) => {
    withBody(req, (body) => {
      void relay({
        sink: nodeSink(res),
        pool: createMemoryKeyPool(keys),
        adapter: upstream,
        request: { url: `http://upstream.test${req.url}`, body: JSON.parse(body) },
        attempt: upstreamFetch(parts) as never,
        ...(downstream === undefined ? {} : { policy: { downstream } }),
      })
    })
  })
  return listen(server)
}

interface Read {
  text: string
  error: unknown
}

async function read(adapter: StreamAdapter, base: string): Promise<Read> {
  let text = ''
  const common = { maxRetries: 0 }
  try {
    if (adapter === openaiChat) {
      const client = new OpenAI({ apiKey: 'sk-placeholder', baseURL: `${base}/v1`, ...common })
      const stream = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      })
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
    } else if (adapter === openaiResponses) {
      const client = new OpenAI({ apiKey: 'sk-placeholder', baseURL: `${base}/v1`, ...common })
      const stream = await client.responses.create({ model: 'm', input: 'hi', stream: true })
      for await (const event of stream) {
        if (event.type === 'response.output_text.delta') text += event.delta
      }
    } else if (adapter === anthropicMessages) {
      const client = new Anthropic({ apiKey: 'sk-placeholder', baseURL: base, ...common })
      const stream = await client.messages.create({
        model: 'm',
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      })
      for await (const event of stream) {
        if (event.type === 'content_block_delta' && event.delta.type === 'text_delta')
          text += event.delta.text
      }
    } else {
      const client = new GoogleGenAI({
        apiKey: 'placeholder',
        httpOptions: { baseUrl: base, retryOptions: { attempts: 1 } },
      })
      const stream = await client.models.generateContentStream({ model: 'm', contents: 'hi' })
      for await (const chunk of stream) {
        for (const part of chunk.candidates?.[0]?.content?.parts ?? []) text += part.text ?? ''
      }
    }
  } catch (error) {
    return { text, error }
  }
  return { text, error: undefined }
}

/** Whether `error` is the SDK's own API error for `adapter`'s protocol. */
function isApiError(adapter: StreamAdapter, error: unknown): boolean {
  if (adapter === anthropicMessages) return error instanceof Anthropic.APIError
  if (adapter === geminiGenerateContent) return (error as Error | undefined)?.name === 'ApiError'
  return error instanceof OpenAI.APIError
}

const protocols = [openaiChat, openaiResponses, anthropicMessages, geminiGenerateContent] as const

describe.each(protocols.map((adapter) => [adapter.name, adapter] as const))(
  'after output, an unreadable error frame from a %s upstream',
  (_, adapter) => {
    describe.each(Object.entries(unreadable))('(%s)', (_, bad) => {
      it.each([false, true])(
        'through createResilientFetch behind serveFetch (own chunk: %s): the SDK raises its API error after the text',
        async (ownChunk) => {
          const fetch = createResilientFetch({
            pool: createMemoryKeyPool(keys),
            fetch: upstreamFetch(upstreamParts(adapter, bad, ownChunk)),
          })
          const served = await serveFetch((request) => fetch(request))
          cleanup(served.close)
          const seen = await read(adapter, served.url)
          expect(seen.text).toBe('Hello world')
          expect(seen.error).toBeDefined()
          expect(isApiError(adapter, seen.error)).toBe(true)
          expect(String(seen.error)).not.toContain(secret)
        },
      )

      it.each([false, true])(
        'through relay() behind node:http (own chunk: %s): the same',
        async (ownChunk) => {
          const base = await gateway(adapter, undefined, upstreamParts(adapter, bad, ownChunk))
          const seen = await read(adapter, base)
          expect(seen.text).toBe('Hello world')
          expect(isApiError(adapter, seen.error)).toBe(true)
        },
      )
    })
  },
)

describe.each(['per-frame', 'frames', 'stream', 'response'] as const)(
  'translated from Chat to Anthropic (%s translator)',
  (form) => {
    it.each(Object.entries(unreadable))(
      'after output (%s): the Anthropic SDK raises its API error after the text',
      async (_, bad) => {
        const parts = upstreamParts(openaiChat, bad, false)
        const base = await gateway(openaiChat, anthropicDownstream(form), parts)
        const seen = await read(anthropicMessages, base)
        expect(seen.text).toBe('Hello world')
        expect(isApiError(anthropicMessages, seen.error)).toBe(true)
      },
    )
  },
)
