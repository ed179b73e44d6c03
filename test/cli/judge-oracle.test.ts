import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import { GoogleGenAI } from '@google/genai'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { judgeObservation, type OutcomeKind } from '../../src/cli/judge.js'
import { chaosAnswer, chaosReasoning, chaosScenarios } from '../../src/cli/scenarios.js'
import {
  anthropicMessages,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import type { Fault } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { wireFor } from '../../src/testing/wire.js'
import { useLoopback } from '../support/loopback.js'

/**
 * The judge is the SDKs' oracle: for bodies a gateway may send a streaming client, and for the
 * bytes of every chaos scenario's fault, the real `openai`, `@anthropic-ai/sdk` and
 * `@google/genai` clients (raw iteration, which the judge follows) read the same bytes, and the
 * judge's verdict must say what they experienced: an error raised is an honest error; nothing
 * yielded and nothing raised is a silent failure; the whole answer is full.
 */

const { listen } = useLoopback()
const answer = 'The quick brown fox jumps over the lazy dog.'
const words = (text: string) => text.match(/\S+\s*/g) ?? [text]

interface Body {
  readonly contentType: string
  readonly text: string | Uint8Array
  /** @default 200 */
  readonly status?: number
  /** The connection is cut after the bytes (a reset), instead of a clean end. */
  readonly cut?: boolean
  /** A body that says something only in this protocol (an OpenAI SDK raises on any event without data). */
  readonly onlyFor?: StreamAdapter
}

/** What the SDK's raw stream iteration did with a body. */
async function sdkReads(
  adapter: StreamAdapter,
  body: Body,
): Promise<'raised' | 'nothing' | 'text'> {
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(body.status ?? 200, { 'content-type': body.contentType })
      if (body.cut !== true) return void res.end(body.text)
      res.write(body.text, () => res.destroy())
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
    } else if (adapter === geminiGenerateContent) {
      const client = new GoogleGenAI({
        apiKey: 'x',
        httpOptions: { baseUrl: url, retryOptions: { attempts: 1 } },
      })
      const stream = await client.models.generateContentStream({ model: 'm', contents: 'hi' })
      for await (const chunk of stream) {
        for (const part of chunk.candidates?.[0]?.content?.parts ?? []) {
          if (part.thought !== true) text += part.text ?? ''
        }
      }
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
  const half = whole.slice(0, Math.floor(whole.length / 2)).join('')
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
            : adapter === geminiGenerateContent
              ? JSON.stringify({
                  candidates: [
                    { content: { role: 'model', parts: [{ text: answer }] }, finishReason: 'STOP' },
                  ],
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
    'half the answer, then data whose error is a string': {
      contentType: sse,
      text: `${half}data: {"error":"upstream failed"}\n\n`,
    },
    'half the answer, then data whose error is true': {
      contentType: sse,
      text: `${half}data: {"error":true}\n\n`,
    },
    'half the answer, then event: error without data': {
      contentType: sse,
      text: `${half}event: error\n\n`,
      onlyFor: anthropicMessages,
    },
    '[DONE], then the whole answer': {
      contentType: sse,
      text: `data: [DONE]\n\n${whole.join('')}`,
    },
    'half the answer, [DONE], then the rest': {
      contentType: sse,
      text: `${half}data: [DONE]\n\n${whole.slice((whole.length / 2) | 0).join('')}`,
    },
    'the whole answer, [DONE], then an error frame': {
      contentType: sse,
      text: `${whole.join('')}data: [DONE]\n\n${w.error(true, 'overloaded')}`,
    },
    'half the answer, then a clean end of the body inside a frame': {
      contentType: sse,
      text: `${whole.slice(0, Math.floor(whole.length / 2)).join('')}data: {"choices":[{"delta":{"content":" jum`,
    },
  }
}

const adapters = [openaiChat, openaiResponses, anthropicMessages, geminiGenerateContent]

/** The judge's verdict on a body, as a client that read it all would hand it over. */
function judge(adapter: StreamAdapter, body: Body, options: { answer: string; reasoning: string }) {
  return judgeObservation(
    {
      status: body.status ?? 200,
      contentType: body.contentType,
      body: typeof body.text === 'string' ? new TextEncoder().encode(body.text) : body.text,
      end: body.cut === true ? 'error' : 'eof',
      ...(body.cut === true ? { error: 'the connection was reset' } : {}),
    },
    { adapter, ...options },
  )
}

describe('the judge agrees with the official SDKs', () => {
  for (const adapter of adapters) {
    describe(adapter.name, () => {
      const cases = Object.entries(bodies(adapter)).filter(
        ([, body]) => body.onlyFor === undefined || body.onlyFor === adapter,
      )
      it.each(cases)('%s', async (_, body) => {
        const sdk = await sdkReads(adapter, body)
        const judged = await judge(adapter, body, { answer, reasoning: '' })
        expect({ sdk, judged: judged.kind }).toEqual({
          sdk,
          judged: expect.toBeOneOf([...expected[sdk]]),
        })
      })
    })
  }
})

/** The request path that makes the faulty upstream speak `adapter`'s protocol. */
const paths = new Map<StreamAdapter, string>([
  [openaiChat, '/v1/chat/completions'],
  [openaiResponses, '/v1/responses'],
  [anthropicMessages, '/v1/messages'],
  [geminiGenerateContent, '/v1beta/models/m:streamGenerateContent?alt=sse'],
])

/** Scenarios whose fault leaves nothing to judge (no response, or no end) or is the client's. */
const unjudgeable = new Set([
  'hang-before-headers',
  'headers-then-hang',
  'client-disconnect',
  'client-pause',
])

/** What the faulty upstream sends for a scenario's first attempt: status, type, bytes, cut. */
async function firstAttemptBytes(
  adapter: StreamAdapter,
  script: readonly (Fault | string)[],
): Promise<Body> {
  const stall = (fault: Fault | string): Fault | string => {
    const kind = typeof fault === 'string' ? fault : fault.kind
    return kind === 'keepalives-only' || kind === 'role-only-then-stall'
      ? { kind, forMs: 30 }
      : fault
  }
  const upstream = createFaultyUpstream({
    scenarios: { s: [stall(script[0] ?? 'ok')] as never },
    text: chaosAnswer,
    reasoning: chaosReasoning,
    keepAliveMs: 10,
  })
  const response = await upstream.fetch(`http://upstream.test${paths.get(adapter)}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
    body: JSON.stringify({ model: 'm', stream: true }),
  })
  const chunks: Uint8Array[] = []
  let cut = false
  const reader = response.body?.getReader()
  try {
    for (
      let read = await reader?.read();
      read !== undefined && !read.done;
      read = await reader?.read()
    ) {
      chunks.push(read.value)
    }
  } catch {
    cut = true
  }
  const bytes = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.length, 0))
  let at = 0
  for (const chunk of chunks) {
    bytes.set(chunk, at)
    at += chunk.length
  }
  await upstream.close()
  return {
    status: response.status,
    contentType: response.headers.get('content-type') ?? 'application/octet-stream',
    text: bytes,
    cut,
  }
}

describe('the judge agrees with the official SDKs on every chaos scenario’s bytes', () => {
  const scenarios = chaosScenarios.filter((scenario) => !unjudgeable.has(scenario.name))
  for (const adapter of adapters) {
    describe(adapter.name, () => {
      it.each(scenarios.map((scenario) => [scenario.name, scenario] as const))(
        '%s',
        async (_, scenario) => {
          const body = await firstAttemptBytes(adapter, scenario.script)
          const sdk = await sdkReads(adapter, body)
          const judged = await judge(adapter, body, {
            answer: chaosAnswer,
            reasoning: chaosReasoning,
          })
          if (process.env.ORACLE_LOG) console.log(adapter.name, scenario.name, sdk, judged.kind)
          expect({ sdk, judged: judged.kind }).toEqual({
            sdk,
            judged: expect.toBeOneOf([...expected[sdk]]),
          })
        },
      )
    })
  }
})
