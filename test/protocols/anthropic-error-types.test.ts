/**
 * The error types an Anthropic client is sent: only Anthropic's documented ones, whatever type
 * the library or a foreign upstream reported.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type RenderableError, sanitizeMessage } from '../../src/advanced.js'
import { anthropicMessages, createFrameReader } from '../../src/index.js'
import { anthropicErrorType } from '../../src/protocols/anthropic-messages.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll } from '../support/sources.js'

/** Anthropic's API docs, "Errors": every error type and its HTTP status. */
const documented = {
  invalid_request_error: 400,
  authentication_error: 401,
  billing_error: 402,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  timeout_error: 504,
  overloaded_error: 529,
} as const
const documentedTypes = Object.keys(documented)

const typeOf = (type: string, extra: Partial<RenderableError> = {}) =>
  anthropicErrorType({ type, message: 'm', ...extra })

async function renderedErrorFrame(error: RenderableError): Promise<unknown> {
  const frames = await readAll(
    createFrameReader(chunkSource([anthropicMessages.renderError(error)])),
  )
  expect(frames).toHaveLength(1)
  expect(frames[0]?.event).toBe('error')
  return JSON.parse(frames[0]?.data ?? '')
}

describe('anthropicErrorType: the mapping table', () => {
  it.each(documentedTypes)('keeps the documented type %s, whatever the status says', (type) => {
    expect(typeOf(type)).toBe(type)
    expect(typeOf(type, { status: 418 })).toBe(type)
    expect(typeOf(type, { code: 'rate_limit_exceeded', status: 502 })).toBe(type)
  })

  it.each([
    ['upstream_error', 'api_error'],
    ['internal_error', 'api_error'],
    ['client_closed', 'api_error'],
    ['timeout', 'timeout_error'],
    ['service_unavailable', 'overloaded_error'],
    ['malformed_frame', 'api_error'],
    ['rate_limit_error', 'rate_limit_error'],
    ['overloaded_error', 'overloaded_error'],
    ['invalid_request_error', 'invalid_request_error'],
    ['request_too_large', 'request_too_large'],
  ])("maps the library's own %s to %s", (type, expected) => {
    expect(typeOf(type)).toBe(expected)
  })

  it('maps the library type over the status it was given with (a 502 upstream_error is api_error, a 503 service_unavailable overloaded_error)', () => {
    expect(typeOf('upstream_error', { status: 502 })).toBe('api_error')
    expect(typeOf('service_unavailable', { status: 503 })).toBe('overloaded_error')
    expect(typeOf('timeout', { status: 504 })).toBe('timeout_error')
    expect(typeOf('client_closed', { status: 499 })).toBe('api_error')
  })

  it.each([
    ['server_error', 'api_error'],
    ['internal_server_error', 'api_error'],
    ['service_unavailable_error', 'overloaded_error'],
    ['rate_limit_exceeded', 'rate_limit_error'],
    ['insufficient_quota', 'billing_error'],
    ['invalid_api_key', 'authentication_error'],
    ['model_not_found', 'not_found_error'],
    ['context_length_exceeded', 'invalid_request_error'],
    ['invalid_prompt', 'invalid_request_error'],
    ['authentication_error', 'authentication_error'],
    ['permission_error', 'permission_error'],
  ])("maps OpenAI's %s to %s", (type, expected) => {
    expect(typeOf(type)).toBe(expected)
  })

  it.each([
    ['INVALID_ARGUMENT', 'invalid_request_error'],
    ['FAILED_PRECONDITION', 'invalid_request_error'],
    ['UNAUTHENTICATED', 'authentication_error'],
    ['PERMISSION_DENIED', 'permission_error'],
    ['NOT_FOUND', 'not_found_error'],
    ['RESOURCE_EXHAUSTED', 'rate_limit_error'],
    ['INTERNAL', 'api_error'],
    ['UNAVAILABLE', 'overloaded_error'],
    ['DEADLINE_EXCEEDED', 'timeout_error'],
  ])("maps Gemini's %s to %s", (type, expected) => {
    expect(typeOf(type)).toBe(expected)
  })

  it('reads an unknown type by its code when the code is known (OpenAI: type "tokens", code "rate_limit_exceeded")', () => {
    expect(typeOf('tokens', { code: 'rate_limit_exceeded', status: 400 })).toBe('rate_limit_error')
    expect(typeOf('requests', { code: 'insufficient_quota' })).toBe('billing_error')
  })

  it.each(Object.entries(documented))(
    'reads an unknown type by its status: %s for %i',
    (expected, status) => {
      expect(typeOf('something_new', { status })).toBe(expected)
      expect(typeOf('something_new', { code: 'unknown_code', status })).toBe(expected)
    },
  )

  it.each([
    [408, 'timeout_error'],
    [503, 'overloaded_error'],
    [422, 'invalid_request_error'],
    [409, 'invalid_request_error'],
    [502, 'api_error'],
    [501, 'api_error'],
    [200, 'api_error'],
  ])('reads an undocumented status %i as %s', (status, expected) => {
    expect(typeOf('something_new', { status })).toBe(expected)
  })

  it('is api_error for an unknown type without a status, and for names Object.prototype has', () => {
    expect(typeOf('something_new')).toBe('api_error')
    expect(typeOf('something_new', { code: null, status: null })).toBe('api_error')
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty', ''])
      expect(typeOf(name, { code: name })).toBe('api_error')
  })

  it('always answers a documented type, for any type, code and status', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string(), fc.constantFrom(...documentedTypes, 'timeout', 'server_error')),
        fc.option(fc.string(), { nil: null }),
        fc.option(fc.integer({ min: -1, max: 1000 }), { nil: null }),
        (type, code, status) => {
          expect(documentedTypes).toContain(typeOf(type, { code, status }))
        },
      ),
      { numRuns: runs(300) },
    )
  })
})

describe('anthropicMessages renders only documented error types', () => {
  const leaky = 'boom <html><title>502 Bad Gateway</title></html> key sk-abcdefghijklmnop1234'

  it('renderErrorBody: {"type":"error","error":{type,message}} with the mapped type and the sanitised message', () => {
    const body = anthropicMessages.renderErrorBody?.({ type: 'upstream_error', message: leaky })
    expect(JSON.parse(body ?? '')).toEqual({
      type: 'error',
      error: { type: 'api_error', message: sanitizeMessage(leaky) },
    })
    expect(sanitizeMessage(leaky)).toContain('boom 502 Bad Gateway')
  })

  it('renderError: one event: error frame with the mapped type and the sanitised message', async () => {
    expect(await renderedErrorFrame({ type: 'timeout', message: leaky })).toEqual({
      type: 'error',
      error: { type: 'timeout_error', message: sanitizeMessage(leaky) },
    })
  })

  it('renderError and renderErrorBody agree with anthropicErrorType for any error', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          type: fc.oneof(
            fc.string({ maxLength: 30 }),
            fc.constantFrom('upstream_error', 'server_error', 'insufficient_quota', 'UNAVAILABLE'),
          ),
          message: fc.string({ maxLength: 200 }),
          code: fc.option(fc.constantFrom('rate_limit_exceeded', 'invalid_api_key', 'x'), {
            nil: null,
          }),
          status: fc.option(fc.constantFrom(400, 401, 402, 403, 404, 413, 429, 500, 502, 503), {
            nil: null,
          }),
        }),
        async (error) => {
          const expected = {
            type: 'error',
            error: { type: anthropicErrorType(error), message: sanitizeMessage(error.message) },
          }
          expect(documentedTypes).toContain(expected.error.type)
          expect(JSON.parse(anthropicMessages.renderErrorBody?.(error) ?? '')).toEqual(expected)
          expect(await renderedErrorFrame(error)).toEqual(expected)
        },
      ),
      { numRuns: runs(100) },
    )
  })

  it('the rendered frame reads back as an error of the mapped type, retryable as that type is', async () => {
    const frame = anthropicMessages.renderError({ type: 'insufficient_quota', message: 'pay' })
    expect(new TextDecoder().decode(frame)).toBe(
      'event: error\ndata: {"type":"error","error":{"type":"billing_error","message":"pay"}}\n\n',
    )
    const [read] = await readAll(createFrameReader(chunkSource([frame])))
    const verdict = read === undefined ? undefined : anthropicMessages.inspect(read)
    expect(verdict).toMatchObject({
      kind: 'error',
      error: { type: 'billing_error', message: 'pay', retryable: false },
    })
  })
})
