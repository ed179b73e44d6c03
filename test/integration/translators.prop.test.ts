import Anthropic from '@anthropic-ai/sdk'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { anthropicDownstream } from '../../examples/anthropic-over-openai-gateway.js'
import { type DownstreamOptions, openaiChat, relay, webSink } from '../../src/index.js'
import { runs } from '../support/runs.js'

/**
 * Whatever the upstream stream and wherever it is cut, a translating relay gives its client a
 * well-formed stream of the client's protocol: the Anthropic SDK parses it, and it either
 * completes with the whole answer or ends in Anthropic's error event (an `APIError`), after
 * a prefix of the answer. Never a parse failure, never a silent cut, never text that was not
 * sent. For each translator shape, written the natural way.
 */

const shapes: readonly [string, DownstreamOptions][] = (
  ['frames', 'stream', 'response', 'per-frame'] as const
).map((form) => [form, anthropicDownstream(form)])

const encoder = new TextEncoder()

function chunk(delta: object, finish: string | null = null): string {
  return `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'gpt-test', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
}

/** An upstream body: its bytes in chunks, then a clean end or a reset. */
function body(bytes: Uint8Array, chunkSize: number, reset: boolean): ReadableStream<Uint8Array> {
  let at = 0
  return new ReadableStream({
    pull(controller) {
      if (at >= bytes.length) {
        if (reset)
          controller.error(Object.assign(new TypeError('terminated'), { code: 'ECONNRESET' }))
        else controller.close()
        return
      }
      controller.enqueue(bytes.slice(at, at + chunkSize))
      at += chunkSize
    },
  })
}

const streams = fc.record({
  words: fc.array(fc.stringMatching(/^[a-z]{1,6} $/), { minLength: 1, maxLength: 8 }),
  /** Where the upstream's bytes stop, in thousandths of them (1000: nothing cut). */
  cut: fc.oneof(fc.constant(1000), fc.integer({ min: 0, max: 999 })),
  reset: fc.boolean(),
  chunkSize: fc.integer({ min: 1, max: 200 }),
})

describe('translated streams are always well-formed in the client’s protocol', () => {
  for (const [shape, downstream] of shapes) {
    it(`${shape}: for random upstream streams and cut points, the SDK completes with the whole answer or raises Anthropic’s error after a prefix of it`, async () => {
      await fc.assert(
        fc.asyncProperty(streams, async ({ words, cut, reset, chunkSize }) => {
          const cutAt = cut / 1000
          const answer = words.join('')
          const full = [
            chunk({ role: 'assistant', content: '' }),
            ...words.map((word) => chunk({ content: word })),
            chunk({}, 'stop'),
            'data: [DONE]\n\n',
          ].join('')
          const bytes = encoder.encode(full)
          const sent = bytes.slice(0, Math.floor(bytes.length * cutAt))
          const { sink, response } = webSink()
          const relayed = relay({
            sink,
            adapter: openaiChat,
            attempt: async () =>
              new Response(body(sent, chunkSize, reset && cutAt < 1), {
                headers: { 'content-type': 'text/event-stream' },
              }),
            policy: { maxAttempts: 1, downstream },
          })
          const client = new Anthropic({
            apiKey: 'x',
            maxRetries: 0,
            fetch: async () => response,
          })
          let text = ''
          let error: unknown
          try {
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
          } catch (caught) {
            error = caught
          }
          await relayed
          expect(answer.startsWith(text)).toBe(true)
          if (error === undefined) {
            expect(text).toBe(answer)
          } else {
            // Anthropic's error event (or the error status before any output, in Anthropic's
            // shape), never a parse failure or a dropped connection.
            expect(error).toBeInstanceOf(Anthropic.APIError)
            expect((error as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
              type: 'error',
              error: { type: expect.any(String), message: expect.any(String) },
            })
          }
        }),
        { numRuns: runs(40) },
      )
    })
  }
})
