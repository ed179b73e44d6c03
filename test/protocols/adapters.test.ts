import { describe, expect, it } from 'vitest'
import { anthropicMessages, classifyEof, createFrameReader, createStreamTracker, geminiGenerateContent, openaiChat, openaiResponses } from '../../src/index.js'
import { isRetryableErrorType, maxMessageLength, redactSecrets, sanitizeMessage, streamTrackerDefaults } from '../../src/advanced.js'
import { chunkSource, readAll, utf8 } from '../support/sources.js'
import { fixtureBytes } from './fixtures.js'

const allAdapters = [openaiChat, openaiResponses, anthropicMessages, geminiGenerateContent]

async function frames(text: string | Uint8Array) {
  return readAll(createFrameReader(chunkSource([typeof text === 'string' ? utf8(text) : text])))
}

describe('sanitizeMessage', () => {
  it('reduces an HTML error page to its title', () => {
    const page =
      '<!DOCTYPE html>\n<html><head><title>503 Service Temporarily Unavailable</title></head><body><h1>503</h1></body></html>'
    expect(sanitizeMessage(page)).toBe('503 Service Temporarily Unavailable')
  })

  it('keeps the text before an embedded page, then the page title', () => {
    expect(
      sanitizeMessage('upstream said: <html><head><title>502 Bad Gateway</title></head></html>'),
    ).toBe('upstream said: 502 Bad Gateway')
  })

  it('strips tags from an HTML page without a title', () => {
    expect(
      sanitizeMessage('<html><body><h1>Bad   gateway</h1><script>x()</script></body></html>'),
    ).toBe('Bad gateway')
  })

  it('bounds the length', () => {
    const message = sanitizeMessage('x'.repeat(10_000))
    expect(message).toHaveLength(maxMessageLength)
    expect(message.endsWith('…')).toBe(true)
  })

  it('redacts API keys, bearer tokens and key query parameters', () => {
    const text =
      'key sk-ant-api03-abcdefghijklmnop, Bearer eyJhbGciOiJIUzI1NiJ9.x.y, url https://g.example/v1?key=AIzaSyA1234567890abcdefghijk&alt=sse, {"x-api-key": "abcdefghijkl"}'
    const out = redactSecrets(text)
    expect(out).not.toMatch(/sk-ant-api03|eyJhbGci|AIzaSyA|abcdefghijkl/)
    expect(out).toContain('Bearer [redacted]')
    expect(out).toContain('?key=[redacted]&alt=sse')
  })

  it('never returns an empty message', () => {
    expect(sanitizeMessage('   ')).toBe('upstream error')
  })
})

describe('isRetryableErrorType', () => {
  it.each([
    ['overloaded_error', true],
    ['rate_limit_error', true],
    ['api_error', true],
    ['server_error', true],
    ['UNAVAILABLE', true],
    ['RESOURCE_EXHAUSTED', true],
    ['invalid_request_error', false],
    ['authentication_error', false],
    ['permission_error', false],
    ['not_found_error', false],
    ['INVALID_ARGUMENT', false],
    ['something_new', true],
  ])('%s → %s', (type, retryable) => {
    expect(isRetryableErrorType(type)).toBe(retryable)
  })

  it('lets a non-retryable code win over a retryable-looking type, and falls back to the status', () => {
    expect(isRetryableErrorType('invalid_request_error', 'context_length_exceeded')).toBe(false)
    expect(isRetryableErrorType('weird', null, 503)).toBe(true)
    expect(isRetryableErrorType('weird', null, 400)).toBe(false)
  })
})

describe('frames that are not what the protocol promised', () => {
  it.each(allAdapters.map((a) => [a.name, a] as const))(
    '%s: an HTML page on a 200 is a retryable MALFORMED_FRAME error with the page title',
    async (_name, adapter) => {
      const [frame] = await frames(
        '<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n',
      )
      const verdict = adapter.inspect(frame as never)
      expect(verdict).toMatchObject({
        kind: 'error',
        error: { code: 'MALFORMED_FRAME', retryable: true },
      })
      expect(verdict.kind === 'error' && verdict.error.message).toContain('502 Bad Gateway')
    },
  )

  it.each(allAdapters.map((a) => [a.name, a] as const))(
    '%s: malformed JSON in a data field is a MALFORMED_FRAME verdict, not an exception',
    async (_name, adapter) => {
      const [frame] = await frames('data: {"choices":[{"delta":\n\n')
      expect(adapter.inspect(frame as never)).toMatchObject({
        kind: 'error',
        error: { code: 'MALFORMED_FRAME' },
      })
    },
  )

  it('a bare JSON error body (not framed as SSE) is read as the upstream error', async () => {
    const [frame] = await frames(
      '{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}',
    )
    expect(geminiGenerateContent.inspect(frame as never)).toEqual({
      kind: 'error',
      error: {
        type: 'UNAVAILABLE',
        message: 'The model is overloaded.',
        code: null,
        status: 503,
        retryable: true,
      },
    })
  })

  it('comment frames and empty frames are keep-alives for every adapter', async () => {
    for (const adapter of allAdapters) {
      for (const frame of await frames(': ping\n\n\n'))
        expect(adapter.inspect(frame).kind).toBe('keepalive')
    }
  })
})

describe('classifyEof', () => {
  const classify = async (adapter: typeof openaiChat, text: string) => {
    const tracker = createStreamTracker(adapter)
    for (const frame of await frames(text)) tracker.observe(frame)
    return classifyEof(tracker.state)
  }

  it('prefers a terminal that names a reason over a bare end marker', async () => {
    const eof = await classify(
      openaiChat,
      'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}\n\ndata: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n',
    )
    expect(eof).toEqual({ kind: 'completed', terminal: { reason: 'length', raw: 'length' } })
  })

  it('counts reasoning with an error as thinking-only, and an error alone as error-only', async () => {
    const reasoning = 'data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}\n\n'
    const error = 'data: {"error":{"message":"boom","type":"server_error"}}\n\n'
    expect((await classify(openaiChat, reasoning + error)).kind).toBe('thinking-only')
    expect(await classify(openaiChat, error)).toMatchObject({
      kind: 'error-only',
      error: { type: 'server_error' },
    })
  })

  it('an error after text is partial: the client saw output', async () => {
    const bytes = fixtureBytes('anthropic-messages/error-after-text.sse')
    const tracker = createStreamTracker(anthropicMessages)
    for (const frame of await frames(bytes)) tracker.observe(frame)
    expect(classifyEof(tracker.state).kind).toBe('partial')
    expect(tracker.state.firstError?.type).toBe('api_error')
  })
})

describe('createStreamTracker', () => {
  it('keeps reasoning up to its bound and no visible text by default', async () => {
    const tracker = createStreamTracker(openaiChat, { keepReasoningChars: 5 })
    for (const frame of await frames(
      'data: {"choices":[{"delta":{"reasoning_content":"abc"}}]}\n\ndata: {"choices":[{"delta":{"reasoning_content":"defgh"}}]}\n\ndata: {"choices":[{"delta":{"content":"x"}}]}\n\n',
    )) {
      tracker.observe(frame)
    }
    expect(tracker.state.reasoningText).toBe('abcde')
    expect(tracker.state.visibleText).toBe('')
    expect(tracker.state.counts).toEqual({ text: 1, tool: 0, reasoning: 2, refusal: 0 })
    expect(tracker.state.firstVisibleIndex).toBe(0)
    expect(tracker.state.firstContentIndex).toBe(2)
    expect(streamTrackerDefaults.keepTextChars).toBe(0)
  })

  it('tracks Anthropic content blocks opened and stopped', async () => {
    const tracker = createStreamTracker(anthropicMessages)
    const all = await frames(fixtureBytes('anthropic-messages/thinking-then-text.sse'))
    const cut = all.findIndex(
      (f) => f.event === 'content_block_delta' && f.data?.includes('text_delta'),
    )
    for (const frame of all.slice(0, cut + 1)) tracker.observe(frame)
    expect(tracker.state.openBlocks).toEqual([1])
    expect(tracker.state.lastBlockIndex).toBe(1)
    const stop = new TextDecoder().decode(anthropicMessages.renderStop(tracker.state))
    expect(stop.indexOf('content_block_stop')).toBeLessThan(stop.indexOf('message_delta'))
    expect(stop).toContain('"index":1')
  })

  it('keeps visible text for Responses by default, whose synthesized stop must repeat it', async () => {
    const tracker = createStreamTracker(openaiResponses)
    for (const frame of await frames(fixtureBytes('openai-responses/text.sse')))
      tracker.observe(frame)
    expect(tracker.state.visibleText).toBe('Greetings, traveller! Welcome aboard.')
    expect(createStreamTracker(openaiResponses, { keepTextChars: 3 }).state.visibleText).toBe('')
  })

  it('rejects invalid options with exact messages', () => {
    expect(() => createStreamTracker(openaiChat, { keepTextChars: -1 })).toThrow(
      'keepTextChars must be a non-negative integer, got -1',
    )
  })
})

describe('anthropicMessages.renderStop', () => {
  it('reports at least one output token per delta seen instead of zeroing the count', async () => {
    const tracker = createStreamTracker(anthropicMessages)
    const all = await frames(fixtureBytes('anthropic-messages/text.sse'))
    const cut = all.findIndex((f) => f.event === 'content_block_stop')
    for (const frame of all.slice(0, cut)) tracker.observe(frame)
    const deltas = tracker.state.counts.text
    expect(deltas).toBeGreaterThan(1)
    const stop = new TextDecoder().decode(anthropicMessages.renderStop(tracker.state))
    expect(stop).toContain(`"usage":{"output_tokens":${deltas}}`)
  })
})
