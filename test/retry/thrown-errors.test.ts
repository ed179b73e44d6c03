/**
 * Errors thrown by other HTTP libraries keep the upstream's status (issue 53): an attempt
 * function built on got, axios, ky, ofetch, gaxios, the `openai` SDK (its real class) or a gateway such as
 * @musistudio/llms throws on a 4xx with the status (and headers and body, where the library
 * keeps them) on the error, each in its own shape. A thrown 404 answers the client 404 after
 * one attempt, with the upstream's error where the library kept its body.
 */

import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { createMemoryKeyPool, openaiChat, relay } from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/index.js'

const notFound = {
  error: {
    message: 'The model `m-x` does not exist',
    type: 'invalid_request_error',
    code: 'model_not_found',
  },
}
const notFoundBody = JSON.stringify(notFound)
const json = { 'content-type': 'application/json', 'x-request-id': 'req_thrown_404' }

/** A `Response` whose body its library already read (and kept as `data`). */
async function readResponse(): Promise<Response> {
  const response = new Response(notFoundBody, { status: 404, headers: json })
  await response.text()
  return response
}

/** axios keeps its headers in an `AxiosHeaders`: own properties, iterable as pairs. */
class AxiosHeadersLike {
  readonly 'content-type' = 'application/json'
  readonly 'x-request-id' = 'req_thrown_404';
  *[Symbol.iterator]() {
    yield* Object.entries(this)
  }
}

/** Each library's error for an upstream's 404, as that library builds it; `true` when it keeps the body. */
const shapes: [string, () => Promise<unknown>, boolean][] = [
  [
    '@musistudio/llms (statusCode on an Error)',
    async () =>
      Object.assign(new Error('Model not found'), { statusCode: 404, code: 'model_not_found' }),
    false,
  ],
  [
    "got's HTTPError (response.statusCode, response.headers, response.body)",
    async () =>
      Object.assign(new Error('Response code 404 (Not Found)'), {
        name: 'HTTPError',
        code: 'ERR_NON_2XX_3XX_RESPONSE',
        response: {
          statusCode: 404,
          statusMessage: 'Not Found',
          headers: json,
          body: notFoundBody,
        },
      }),
    true,
  ],
  [
    "axios's AxiosError (response.status, AxiosHeaders, response.data parsed)",
    async () =>
      Object.assign(new Error('Request failed with status code 404'), {
        name: 'AxiosError',
        code: 'ERR_BAD_REQUEST',
        status: 404,
        response: {
          status: 404,
          statusText: 'Not Found',
          headers: new AxiosHeadersLike(),
          data: notFound,
        },
      }),
    true,
  ],
  [
    "ky's HTTPError (response, an unread Response)",
    async () =>
      Object.assign(new Error('Request failed with status code 404 Not Found'), {
        name: 'HTTPError',
        response: new Response(notFoundBody, { status: 404, headers: json }),
      }),
    true,
  ],
  [
    "ofetch's FetchError (status, statusCode, a read response, data)",
    async () =>
      Object.assign(new Error('[POST] "/v1/chat/completions": 404 Not Found'), {
        name: 'FetchError',
        status: 404,
        statusCode: 404,
        statusText: 'Not Found',
        response: await readResponse(),
        data: notFound,
      }),
    true,
  ],
  [
    "gaxios's GaxiosError (status, a read response and its data)",
    async () =>
      Object.assign(new Error('Not Found'), {
        name: 'GaxiosError',
        status: 404,
        config: { url: new URL('http://upstream.test/') },
        response: Object.assign(await readResponse(), { data: notFound, config: {} }),
      }),
    true,
  ],
  [
    "the openai SDK's NotFoundError (the real class: status and headers)",
    async () => OpenAI.APIError.generate(404, notFound, undefined, new Headers(json)),
    false,
  ],
  [
    'a thrown Response',
    async () => new Response(notFoundBody, { status: 404, headers: json }),
    true,
  ],
]

describe('errors thrown by other HTTP libraries keep the upstream’s status', () => {
  for (const stream of [true, false]) {
    it.each(shapes)(
      `${stream ? 'streaming' : 'non-streaming'}: %s is one attempt and the client's 404`,
      async (_name, make, keepsBody) => {
        let sent = 0
        const sink = createRecordingSink()
        const pool = createMemoryKeyPool([
          { id: 'a', secret: 'sk-thrown-a-0123456789' },
          { id: 'b', secret: 'sk-thrown-b-0123456789' },
        ])
        const thrown = await make()
        const outcome = await relay({
          sink,
          pool,
          adapter: openaiChat,
          request: {
            url: 'http://upstream.test/v1/chat/completions',
            body: { model: 'm-x', stream, messages: [{ role: 'user', content: 'hi' }] },
          },
          attempt: async () => {
            sent++
            throw thrown
          },
          policy: { maxAttempts: 3, backoff: { baseMs: 1, maxMs: 2 } },
        })
        expect(sent).toBe(1)
        expect(outcome).toMatchObject({ kind: 'failed', status: 404 })
        expect(sink.status).toBe(404)
        if (keepsBody) expect(sink.text).toContain('model_not_found')
        const stats = await pool.stats()
        expect(stats.reduce((n, s) => n + s.outcomes['server-error'], 0)).toBe(0)
        expect(stats.reduce((n, s) => n + s.outcomes.rejected, 0)).toBe(1)
      },
    )
  }

  it('a thrown 429 in got’s shape keeps its retry-after: another key answers', async () => {
    const keys: string[] = []
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool([
        { id: 'a', secret: 'sk-thrown-a-0123456789' },
        { id: 'b', secret: 'sk-thrown-b-0123456789' },
      ]),
      adapter: openaiChat,
      attempt: async ({ key }) => {
        keys.push(key.id)
        if (keys.length === 1)
          throw Object.assign(new Error('Response code 429'), {
            response: { statusCode: 429, headers: { 'retry-after': ['30'] }, body: '' },
          })
        return new Response(
          'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n',
          { headers: { 'content-type': 'text/event-stream' } },
        )
      },
      policy: { maxAttempts: 3, backoff: { baseMs: 1, maxMs: 2 } },
    })
    expect(outcome.kind).toBe('committed')
    expect(keys).toEqual(['a', 'b'])
    expect(outcome.attempts[0]).toMatchObject({ status: 429, result: 'status-429' })
  })

  it('an error whose fields throw when read is a connection failure, not a crash', async () => {
    const hostile = Object.defineProperty(new Error('boom'), 'response', {
      get() {
        throw new Error('no')
      },
    })
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-thrown-a-0123456789' }]),
      adapter: openaiChat,
      attempt: async () => {
        throw hostile
      },
      policy: { maxAttempts: 1 },
    })
    expect(outcome).toMatchObject({ kind: 'failed', status: 502, reason: 'connection-error' })
  })
})
