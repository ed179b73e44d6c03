import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { judgeObservation, type OutcomeKind } from '../../src/cli/judge.js'
import {
  anthropicMessages,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import { wireFor } from '../../src/testing/wire.js'
import { useLoopback } from '../support/loopback.js'

/**
 * The judge is the SDKs' oracle: for bodies a gateway may send a streaming client, the real
 * `openai` and `@anthropic-ai/sdk` clients (raw iteration, which the judge follows) read the
 * same bytes, and the judge's verdict must say what they experienced: an error raised is an
 * honest error; nothing yielded and nothing raised is a silent failure; the whole answer is
 * full.
 */

const { listen } = useLoopback()
const answer = 'The quick brown fox jumps over the lazy dog.'
const words = (text: string) => text.match(/\S+\s*/g) ?? [text]

interface Body {
  readonly contentType: string
  readonly text: string
}

/** What the SDK's raw stream iteration did with a body. */
async function sdkReads(
  adapter: StreamAdapter,
  body: Body,
): Promise<'raised' | 'nothing' | 'text'> {
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': body.contentType })
      res.end(body.text)
    })
  })
  const url = await listen(server)
  let text = ''
  try {
    if (adapter === openaiResponses) {
      const client = new OpenAI({ apiKey: 'x', baseURL: `${url}/v1`, maxRetries: 0 })
      const stream = await client.responses.create({ model: 'm', input: 'hi', stream: true })
      for await (const event of stream) {
        if (event.type === 'response.output_text.delta') text += event.delta
      }
    } else if (adapter === openaiChat) {
      const client = new OpenAI({ apiKey: 'x', baseURL: `${url}/v1`, maxRetries: 0 })
      const stream = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      })
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
    } else {
      const client = new Anthropic({ apiKey: 'x', baseURL: url, maxRetries: 0 })
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
    }
  } catch {
    return 'raised'
  }
  return text === '' ? 'nothing' : 'text'
}

const expected: Record<'raised' | 'nothing' | 'text', readonly OutcomeKind[]> = {
  raised: ['honest-error'],
  nothing: ['silent-empty'],
  text: ['full', 'silent-cut'],
}

function bodies(adapter: StreamAdapter): Record<string, Body> {
  const w = wireFor(adapter)
  const whole = [
    ...w.start(),
    ...words(answer).flatMap((word) => w.text(word)),
    ...w.finish('stop'),
  ]
  const json = 'application/json'
  const sse = 'text/event-stream'
  return {
    'the whole answer as a stream': { contentType: sse, text: whole.join('') },
    'the answer as one JSON body (a gateway that does not stream)': {
      contentType: json,
      text:
        adapter === openaiResponses
          ? JSON.stringify({
              id: 'resp_1',
              object: 'response',
              status: 'completed',
              output: [
                {
                  type: 'message',
                  role: 'assistant',
                  content: [{ type: 'output_text', text: answer }],
                },
              ],
            })
          : adapter === openaiChat
            ? JSON.stringify({
                id: 'c',
                object: 'chat.completion',
                choices: [{ index: 0, message: { role: 'assistant', content: answer } }],
              })
            : JSON.stringify({
                id: 'm',
                type: 'message',
                role: 'assistant',
                content: [{ type: 'text', text: answer }],
              }),
    },
    'a JSON error body with 200': {
      contentType: json,
      text: w.errorBody('api_error', 'boom', 500),
    },
    'an HTML page sent as an event stream': {
      contentType: sse,
      text: '<html><title>502 Bad Gateway</title></html>',
    },
    'bare JSON sent as an event stream': {
      contentType: sse,
      text: '{"error":{"type":"api_error","message":"boom"}}',
    },
    'frames without event: lines': {
      contentType: sse,
      text: whole
        .join('')
        .split('\n')
        .filter((line) => !line.startsWith('event:'))
        .join('\n'),
    },
    'an error event in the protocol': { contentType: sse, text: w.error(true, 'overloaded') },
    'half the answer, then a clean end of the body inside a frame': {
      contentType: sse,
      text: `${whole.slice(0, Math.floor(whole.length / 2)).join('')}data: {"choices":[{"delta":{"content":" jum`,
    },
  }
}

describe('the judge agrees with the official SDKs', () => {
  for (const adapter of [openaiChat, openaiResponses, anthropicMessages]) {
    describe(adapter.name, () => {
      it.each(Object.entries(bodies(adapter)))('%s', async (_, body) => {
        const sdk = await sdkReads(adapter, body)
        const judged = await judgeObservation(
          {
            status: 200,
            contentType: body.contentType,
            body: new TextEncoder().encode(body.text),
            end: 'eof',
          },
          { adapter, answer, reasoning: '' },
        )
        expect({ sdk, judged: judged.kind }).toEqual({
          sdk,
          judged: expect.toBeOneOf([...expected[sdk]]),
        })
      })
    })
  }
})
