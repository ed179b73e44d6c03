/**
 * What the official `@anthropic-ai/sdk` makes of the errors and promoted reasoning the library
 * writes for Anthropic clients, over real HTTP on 127.0.0.1: error bodies raise the SDK's class
 * for their status and carry a documented type; an in-band error rejects `finalMessage()` with a
 * documented type; reasoning promoted by the pump reads as one whole message.
 */
import { createServer, type ServerResponse } from 'node:http'
import Anthropic, { type APIError } from '@anthropic-ai/sdk'
import { describe, expect, it } from 'vitest'
import { type RenderableError, sanitizeMessage } from '../../src/advanced.js'
import {
  anthropicMessages,
  createCommitGate,
  deliver,
  failBeforeContent,
  openaiChat,
} from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { scriptedBody } from '../../src/testing/scripted-body.js'
import { useLoopback, withBody } from '../support/loopback.js'

const { listen } = useLoopback()

/** Anthropic's API docs, "Errors". */
const documentedTypes = [
  'invalid_request_error',
  'authentication_error',
  'billing_error',
  'permission_error',
  'not_found_error',
  'request_too_large',
  'rate_limit_error',
  'api_error',
  'timeout_error',
  'overloaded_error',
]

const leaky = 'went away <html><title>502 Bad Gateway</title></html> key sk-abcdefghijklmnop1234'
const ask = {
  model: 'claude-test',
  max_tokens: 1024,
  messages: [{ role: 'user' as const, content: 'hi' }],
}

/** A server on 127.0.0.1 that answers every request with `answer(res)`; an SDK pointed at it. */
async function sdkAgainst(answer: (res: ServerResponse) => void | Promise<void>) {
  const server = createServer((req, res) => withBody(req, () => void answer(res)))
  const baseURL = await listen(server)
  return new Anthropic({ baseURL, apiKey: 'x', maxRetries: 0 })
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (error) {
    return error
  }
  throw new Error('expected a rejection')
}

/** The SDK's `APIError`, with a documented type in both places it keeps one, and the message. */
function expectDocumentedError(error: unknown, type: string): asserts error is APIError {
  expect(error).toBeInstanceOf(Anthropic.APIError)
  if (!(error instanceof Anthropic.APIError)) return
  expect(documentedTypes).toContain(type)
  expect(error.type).toBe(type)
  expect(error.error).toEqual({
    type: 'error',
    error: { type, message: sanitizeMessage(leaky) },
  })
  expect(error.message).toContain('went away 502 Bad Gateway')
  expect(error.message).not.toContain('sk-abcdefghijklmnop1234')
}

// --- error bodies before commit -------------------------------------------------------------

type ErrorClass = abstract new (...args: never[]) => APIError

const bodyCases: [type: string, status: number, sdkClass: ErrorClass, expected: string][] = [
  ['rate_limit_error', 429, Anthropic.RateLimitError, 'rate_limit_error'],
  ['rate_limit_exceeded', 429, Anthropic.RateLimitError, 'rate_limit_error'],
  ['insufficient_quota', 429, Anthropic.RateLimitError, 'billing_error'],
  ['upstream_error', 502, Anthropic.InternalServerError, 'api_error'],
  ['internal_error', 500, Anthropic.InternalServerError, 'api_error'],
  ['server_error', 500, Anthropic.InternalServerError, 'api_error'],
  ['timeout', 504, Anthropic.GatewayTimeoutError, 'timeout_error'],
  ['service_unavailable', 503, Anthropic.ServiceUnavailableError, 'overloaded_error'],
  ['overloaded_error', 529, Anthropic.OverloadedError, 'overloaded_error'],
  ['UNAVAILABLE', 503, Anthropic.ServiceUnavailableError, 'overloaded_error'],
  ['invalid_request_error', 400, Anthropic.BadRequestError, 'invalid_request_error'],
  ['authentication_error', 401, Anthropic.AuthenticationError, 'authentication_error'],
  ['request_too_large', 413, Anthropic.ContentTooLargeError, 'request_too_large'],
  ['something_new', 403, Anthropic.PermissionDeniedError, 'permission_error'],
  ['something_new', 404, Anthropic.NotFoundError, 'not_found_error'],
  ['something_new', 402, Anthropic.PaymentRequiredError, 'billing_error'],
  ['client_closed', 499, Anthropic.ClientClosedRequestError, 'api_error'],
]

describe('renderErrorBody, read by the @anthropic-ai/sdk over HTTP', () => {
  it.each(bodyCases)(
    '%s with HTTP %i: the SDK raises %O carrying %s',
    async (type, status, sdkClass, expected) => {
      const body = anthropicMessages.renderErrorBody?.({ type, message: leaky, status }) ?? ''
      const sdk = await sdkAgainst((res) => {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(body)
      })
      const error = await rejection(sdk.messages.create(ask))
      expect(error).toBeInstanceOf(sdkClass)
      expectDocumentedError(error, expected)
      expect((error as APIError).status).toBe(status)
      // The streaming helper raises the same before any event.
      const streamed = await rejection(sdk.messages.stream(ask).finalMessage())
      expect(streamed).toBeInstanceOf(sdkClass)
      expectDocumentedError(streamed, expected)
    },
  )

  it('through failBeforeContent into nodeSink (the path relay gives up by): a 502 upstream_error is an InternalServerError with api_error', async () => {
    const sdk = await sdkAgainst((res) =>
      failBeforeContent(createCommitGate(nodeSink(res)), anthropicMessages, 502, {
        type: 'upstream_error',
        message: leaky,
      }),
    )
    const error = await rejection(sdk.messages.create(ask))
    expect(error).toBeInstanceOf(Anthropic.InternalServerError)
    expectDocumentedError(error, 'api_error')
  })
})

// --- in-band error after commit -------------------------------------------------------------

const sse = (type: string, body: Record<string, unknown> = {}) =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`
const started =
  sse('message_start', {
    message: {
      id: 'msg_01fidelity',
      type: 'message',
      role: 'assistant',
      content: [],
      model: 'claude-test',
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 5, output_tokens: 1 },
    },
  }) +
  sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
  sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello, wor' } })

const frameCases: [error: Omit<RenderableError, 'message'>, expected: string][] = [
  [{ type: 'upstream_error' }, 'api_error'],
  [{ type: 'timeout' }, 'timeout_error'],
  [{ type: 'client_closed' }, 'api_error'],
  [{ type: 'internal_error' }, 'api_error'],
  [{ type: 'service_unavailable' }, 'overloaded_error'],
  [{ type: 'server_error' }, 'api_error'],
  [{ type: 'rate_limit_exceeded' }, 'rate_limit_error'],
  [{ type: 'insufficient_quota' }, 'billing_error'],
  [{ type: 'overloaded_error' }, 'overloaded_error'],
  [{ type: 'something_new', status: 403 }, 'permission_error'],
  [{ type: 'something_new' }, 'api_error'],
]

describe('renderError (event: error after output), read by the @anthropic-ai/sdk over HTTP', () => {
  it.each(frameCases)(
    '%o: the text arrives, then finalMessage() rejects with an APIError typed %s',
    async (error, expected) => {
      const frame = anthropicMessages.renderError({ ...error, message: leaky })
      const sdk = await sdkAgainst((res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(started)
        res.end(frame)
      })
      let text = ''
      const stream = sdk.messages.stream(ask).on('text', (delta) => {
        text += delta
      })
      const rejected = await rejection(stream.finalMessage())
      expect(text).toBe('Hello, wor')
      expectDocumentedError(rejected, expected)
    },
  )
})

// --- reasoning promoted by the pump ---------------------------------------------------------

const thinking = (text: string) =>
  sse('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: text } })
const chatReasoning = (text: string) =>
  `data: ${JSON.stringify({ choices: [{ index: 0, delta: { reasoning_content: text }, finish_reason: null }] })}\n\n`

describe("reasoning promoted by deliver({ onThinkingOnly: 'promote-reasoning' }), read by the @anthropic-ai/sdk over HTTP", () => {
  it.each([
    [
      'an Anthropic upstream that sent thinking deltas and no message_start',
      thinking('Let me think.') + thinking(' 42.'),
      {},
    ],
    [
      'an Anthropic upstream that sent a message_start, a thinking block and deltas',
      started.split('event: content_block_start')[0] +
        sse('content_block_start', {
          index: 0,
          content_block: { type: 'thinking', thinking: '', signature: '' },
        }) +
        thinking('Let me think.') +
        thinking(' 42.'),
      {},
    ],
    [
      'an OpenAI upstream whose reasoning the translator drops (the client was sent nothing)',
      chatReasoning('Let me think.') + chatReasoning(' 42.'),
      { upstream: openaiChat, downstream: { adapter: anthropicMessages, transform: () => null } },
    ],
  ])(
    '%s: finalMessage() resolves with the reasoning as text and end_turn',
    async (_, wire, how) => {
      const outcomes: unknown[] = []
      const sdk = await sdkAgainst(async (res) => {
        const outcome = await deliver({
          gate: createCommitGate(nodeSink(res), { keepAliveIntervalMs: Number.POSITIVE_INFINITY }),
          body: scriptedBody([{ bytes: wire }]).stream,
          adapter: 'upstream' in how ? how.upstream : anthropicMessages,
          onThinkingOnly: 'promote-reasoning',
          ...('downstream' in how ? { downstream: how.downstream } : {}),
        })
        outcomes.push(outcome)
      })
      const events: Anthropic.RawMessageStreamEvent[] = []
      const message = await sdk.messages
        .stream(ask)
        .on('streamEvent', (event) => events.push(event))
        .finalMessage()
      expect(outcomes).toMatchObject([
        { kind: 'committed', pump: { end: { kind: 'reasoning-promoted' } } },
      ])
      expect(events.filter((event) => event.type === 'message_start')).toHaveLength(1)
      expect(message.role).toBe('assistant')
      expect(message.stop_reason).toBe('end_turn')
      expect(message.content.at(-1)).toEqual({ type: 'text', text: 'Let me think. 42.' })
    },
  )
})
