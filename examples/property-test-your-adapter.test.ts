/**
 * A worked example for adapter authors: a made-up protocol ("TokenStream"), its adapter, a
 * stream generator, and `checkAdapter` from `stream-boundary/testing` running the library's
 * conformance properties against it. It runs in the test suite.
 *
 * TokenStream frames: `event: token` (answer text), `event: think` (reasoning),
 * `event: done` (the end), `event: fail` (an error), and SSE comments as keep-alives.
 */

import fc from 'fast-check'
import type { SseFrame, StreamAdapter } from 'stream-boundary'
import type { FrameVerdict, RenderableError } from 'stream-boundary/advanced'
import { isRetryableErrorType, sanitizeMessage } from 'stream-boundary/advanced'
import { checkAdapter, type StreamSample } from 'stream-boundary/testing'
import { expect, it } from 'vitest'

const encoder = new TextEncoder()
const frame = (event: string, body: unknown) => `event: ${event}\ndata: ${JSON.stringify(body)}\n\n`

function parse(data: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(data)
    return typeof value === 'object' && value !== null
      ? (value as Record<string, unknown>)
      : undefined
  } catch {
    return undefined
  }
}

const tokenStream: StreamAdapter = {
  name: 'token-stream',
  inspect(sse: SseFrame): FrameVerdict {
    if (sse.data === undefined)
      return sse.comments.length > 0 || sse.raw.every((b) => b === 10 || b === 13)
        ? { kind: 'keepalive' }
        : { kind: 'meta' }
    const body = parse(sse.data)
    const error = (message: string, code: number | null = null): FrameVerdict => ({
      kind: 'error',
      error: {
        type: 'fail',
        message: sanitizeMessage(message),
        code: null,
        status: code,
        retryable: code === null || isRetryableErrorType('fail', null, code),
      },
    })
    if (body === undefined) return error(`not JSON: ${sse.data}`)
    const text = typeof body.t === 'string' ? body.t : ''
    switch (sse.event) {
      case 'token':
        return text === '' ? { kind: 'meta' } : { kind: 'text', text }
      case 'think':
        return text === '' ? { kind: 'meta' } : { kind: 'reasoning', text }
      case 'done':
        return {
          kind: 'terminal',
          terminal: { reason: 'stop', raw: String(body.reason ?? 'stop') },
        }
      case 'fail':
        return error(
          String(body.message ?? 'failed'),
          typeof body.code === 'number' ? body.code : null,
        )
      default:
        return { kind: 'meta' }
    }
  },
  renderError: (error: RenderableError) =>
    encoder.encode(
      frame('fail', {
        code: typeof error.status === 'number' ? error.status : 502,
        message: sanitizeMessage(error.message),
      }),
    ),
  renderStop: () => encoder.encode(frame('done', { reason: 'stop' })),
  renderReasoningAsText: (state) => encoder.encode(frame('token', { t: state.reasoningText })),
}

/** TokenStream streams of every shape, each stating how it must end. */
const streams: fc.Arbitrary<StreamSample> = fc
  .record({
    thoughts: fc.array(fc.string({ minLength: 1 }), { maxLength: 3 }),
    tokens: fc.array(fc.string({ minLength: 1 }), { maxLength: 6 }),
    end: fc.constantFrom('done', 'cut', 'fail'),
    keepalives: fc.nat({ max: 3 }),
  })
  .map(({ thoughts, tokens, end, keepalives }) => {
    const frames = [
      ...Array.from({ length: keepalives }, () => ': ping\n\n'),
      ...thoughts.map((t) => frame('think', { t })),
      ...tokens.map((t) => frame('token', { t })),
    ]
    if (end === 'done') frames.push(frame('done', { reason: 'stop' }))
    if (end === 'fail') frames.push(frame('fail', { code: 503, message: 'busy' }))
    const visible = tokens.length > 0
    const eof =
      end === 'done'
        ? 'completed'
        : visible
          ? 'partial'
          : thoughts.length > 0
            ? 'thinking-only'
            : end === 'fail'
              ? 'error-only'
              : 'empty'
    return { bytes: encoder.encode(frames.join('')), eof } as const
  })

it('the TokenStream adapter passes the stream-boundary adapter conformance properties', async () => {
  await checkAdapter(tokenStream, { streams, numRuns: 100 })
})

it('a TokenStream adapter that mistakes done for bookkeeping is caught, with the property named', async () => {
  const forgetful: StreamAdapter = {
    ...tokenStream,
    inspect: (sse) => (sse.event === 'done' ? { kind: 'meta' } : tokenStream.inspect(sse)),
  }
  await expect(checkAdapter(forgetful, { streams, numRuns: 100 })).rejects.toThrow(
    /breaks the property "the EOF class is the one the sample states"/,
  )
})
