import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { isRetryableErrorType, type RenderableError, sanitizeMessage } from '../../src/advanced.js'
import {
  classifyEof,
  createFrameReader,
  createStreamTracker,
  type SseFrame,
  type StreamAdapter,
} from '../../src/index.js'
import { anthropicErrorType } from '../../src/protocols/anthropic-messages.js'
import * as arbitraries from '../../src/testing/arbitraries.js'
import { chunkings, concatBytes, sseStream } from '../../src/testing/arbitraries.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll } from '../support/sources.js'
import { adapters, fixtureBytes, fixtures } from './fixtures.js'

const numRuns = runs(100)
const protocols = Object.keys(adapters) as (keyof typeof adapters)[]
const encoder = new TextEncoder()

const framesOf = (bytes: Uint8Array) => readAll(createFrameReader(chunkSource([bytes])))

/** A tracker that has seen the first `length` frames of a fixture of the protocol. */
async function trackedPrefix(protocol: keyof typeof adapters, file: string, length: number) {
  const adapter = adapters[protocol]
  const tracker = createStreamTracker(adapter, { keepTextChars: 4096 })
  const frames = await framesOf(fixtureBytes(file))
  for (const frame of frames.slice(0, length)) tracker.observe(frame)
  return tracker
}

const fixtureOf = (protocol: keyof typeof adapters) =>
  fc.constantFrom(...fixtures.filter((f) => f.protocol === protocol).map((f) => f.file))

const errorTypes = fc.constantFrom(
  'overloaded_error',
  'rate_limit_error',
  'server_error',
  'invalid_request_error',
  'timeout',
  'upstream_error',
  'UNAVAILABLE',
  'INVALID_ARGUMENT',
)

const secret = fc.stringMatching(/^[A-Za-z0-9]{20,30}$/).map((s) => `sk-${s}`)

const renderableError: fc.Arbitrary<RenderableError & { secret: string }> = fc
  .record({
    type: errorTypes,
    message: fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.constant(
        '<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>x</body></html>',
      ),
      fc.string({ unit: 'grapheme', maxLength: 800 }),
    ),
    code: fc.option(fc.constantFrom('context_length_exceeded', 'rate_limit_exceeded'), {
      nil: null,
    }),
    status: fc.option(fc.constantFrom(429, 500, 503, 400), { nil: null }),
    secret,
  })
  .map((e) => ({ ...e, message: `${e.message} key=${e.secret}` }))

/** A data frame whose JSON is arbitrary, with or without a protocol event name. */
const jsonFrame = fc
  .tuple(
    fc.option(
      fc.constantFrom(
        'message_start',
        'content_block_delta',
        'error',
        'ping',
        'response.completed',
        'response.output_text.delta',
      ),
    ),
    fc.oneof(fc.json(), fc.string()),
  )
  .map(([event, data]) =>
    encoder.encode(`${event === null ? '' : `event: ${event}\n`}data: ${data}\n\n`),
  )

describe.each(protocols)('%s adapter properties', (protocol) => {
  const adapter: StreamAdapter = adapters[protocol]

  it('inspect never throws: every frame of any byte stream, or any JSON, gets a verdict', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(sseStream(), jsonFrame), async (bytes) => {
        const tracker = createStreamTracker(adapter)
        for (const frame of await framesOf(bytes)) {
          const verdict = tracker.observe(frame)
          expect([
            'text',
            'tool',
            'reasoning',
            'refusal',
            'meta',
            'keepalive',
            'terminal',
            'error',
          ]).toContain(verdict.kind)
        }
        expect(['completed', 'partial', 'thinking-only', 'error-only', 'empty']).toContain(
          classifyEof(tracker.state).kind,
        )
      }),
      { numRuns },
    )
  })

  it('a rendered error is one well-formed frame the same adapter classifies as that error, sanitised and without secrets', async () => {
    await fc.assert(
      fc.asyncProperty(
        fixtureOf(protocol),
        fc.nat({ max: 40 }),
        renderableError,
        async (file, length, error) => {
          const tracker = await trackedPrefix(protocol, file, length)
          const bytes = adapter.renderError(error, tracker.state)
          const frames = await framesOf(bytes)
          expect(frames).toHaveLength(1)
          const [frame] = frames as [SseFrame]
          expect(frame.terminated).toBe(true)
          const verdict = adapter.inspect(frame)
          expect(verdict.kind).toBe('error')
          if (verdict.kind !== 'error') return
          // Anthropic clients are sent only Anthropic's documented types.
          expect(verdict.error.type).toBe(
            protocol === 'anthropic-messages' ? anthropicErrorType(error) : error.type,
          )
          expect(verdict.error.message).toBe(sanitizeMessage(error.message))
          expect(verdict.error.retryable).toBe(
            isRetryableErrorType(verdict.error.type, verdict.error.code, verdict.error.status),
          )
          expect(new TextDecoder().decode(bytes)).not.toContain(error.secret)
        },
      ),
      { numRuns },
    )
  })

  it('a rendered stop after output is well-formed SSE, classified as terminal, and the stream then ends completed', async () => {
    await fc.assert(
      fc.asyncProperty(fixtureOf(protocol), fc.nat({ max: 40 }), async (file, length) => {
        const tracker = await trackedPrefix(protocol, file, length)
        fc.pre(tracker.state.firstVisibleIndex !== null && !tracker.state.terminalSeen)
        const bytes = adapter.renderStop(tracker.state)
        const frames = await framesOf(bytes)
        expect(concatBytes(frames.map((f) => f.raw))).toEqual(bytes)
        expect(frames.every((f) => f.terminated)).toBe(true)
        const verdicts = frames.map((frame) => tracker.observe(frame))
        expect(verdicts.some((v) => v.kind === 'error')).toBe(false)
        expect(
          verdicts.some(
            (v) => v.kind === 'terminal' || ('terminal' in v && v.terminal !== undefined),
          ),
        ).toBe(true)
        expect(classifyEof(tracker.state).kind).toBe('completed')
        // Anthropic's SDK expects every open content block to be stopped before message_stop.
        if (protocol === 'anthropic-messages') expect(tracker.state.openBlocks).toEqual([])
      }),
      { numRuns },
    )
  })

  it('promoted reasoning is visible text equal to the collected reasoning, and well-formed SSE', async () => {
    await fc.assert(
      fc.asyncProperty(
        fixtureOf(protocol),
        fc.nat({ max: 40 }),
        fc.string({ unit: 'grapheme', minLength: 1, maxLength: 300 }),
        async (file, length, extra) => {
          const tracker = await trackedPrefix(protocol, file, length)
          const state = { ...tracker.state, reasoningText: tracker.state.reasoningText + extra }
          const bytes = adapter.renderReasoningAsText(state)
          const frames = await framesOf(bytes)
          expect(concatBytes(frames.map((f) => f.raw))).toEqual(bytes)
          const verdicts = frames.map((frame) => adapter.inspect(frame))
          expect(verdicts.every((v) => v.kind === 'text' || v.kind === 'meta')).toBe(true)
          const text = verdicts.map((v) => (v.kind === 'text' ? v.text : '')).join('')
          expect(text).toBe(state.reasoningText)
        },
      ),
      { numRuns },
    )
  })

  it('quickOutput vouches only for frames inspect classifies as output that neither ends nor fails', async () => {
    const quick = adapter.quickOutput?.bind(adapter)
    expect(quick).toBeDefined()
    const fixtureFrames = (
      await Promise.all(
        fixtures.filter((f) => f.protocol === protocol).map((f) => framesOf(fixtureBytes(f.file))),
      )
    ).flat()
    let vouched = 0
    const check = (frame: SseFrame) => {
      if (!quick?.(frame)) return
      vouched++
      const verdict = adapter.inspect(frame)
      expect(['text', 'tool', 'reasoning', 'refusal', 'meta']).toContain(verdict.kind)
      expect('terminal' in verdict && verdict.terminal !== undefined).toBe(false)
    }
    for (const frame of fixtureFrames) check(frame)
    expect(vouched).toBeGreaterThan(0)
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          arbitraries.protocolStream(adapter).map((s) => s.bytes),
          sseStream(),
          jsonFrame,
        ),
        async (bytes) => {
          for (const frame of await framesOf(bytes)) check(frame)
        },
      ),
      { numRuns },
    )
  })

  it('rendered frames classify the same under every chunking', async () => {
    await fc.assert(
      fc.asyncProperty(
        renderableError.chain((error) => {
          const bytes = adapter.renderError(error)
          return chunkings(bytes).map((chunks) => ({ bytes, chunks }))
        }),
        async ({ bytes, chunks }) => {
          const whole = (await framesOf(bytes)).map((f) => adapter.inspect(f))
          const split = (await readAll(createFrameReader(chunkSource(chunks)))).map((f) =>
            adapter.inspect(f),
          )
          expect(split).toEqual(whole)
        },
      ),
      { numRuns: runs(50) },
    )
  })
})
