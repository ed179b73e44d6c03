import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { FrameVerdict, StreamTracker } from '../../src/advanced.js'
import {
  classifyEof,
  createFrameReader,
  createStreamTracker,
  type SseFrame,
  type StreamAdapter,
} from '../../src/index.js'
import { mayReportMore } from '../../src/protocols/shortcut.js'
import * as arbitraries from '../../src/testing/arbitraries.js'
import { concatBytes } from '../../src/testing/arbitraries.js'
import { adapters, fixtureBytes, fixtures } from '../protocols/fixtures.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll } from '../support/sources.js'

/**
 * After commit the tracker reads most frames through a shortcut: the adapter's `quickOutput`
 * byte checks, then "text" without decoding or parsing. Whatever the shortcut skips (usage,
 * a terminal, an error, block edges) must come out as the full reading (`inspect` on every
 * frame) gives it, or the shortcut must not be taken. The property compares a tracker that
 * reads committed frames through `observeCommitted` with one that inspects every frame, over
 * the fixtures, each protocol's generated streams and frames made to look like output
 * deltas while carrying usage, an error or a finish (OpenRouter sends its usage on a chunk
 * after the finish that repeats a choice with `"finish_reason":null`).
 */

const numRuns = runs(150)
const encoder = new TextEncoder()
const framesOf = (bytes: Uint8Array) => readAll(createFrameReader(chunkSource([bytes])))

const text = fc.string({ maxLength: 12 })
const tokens = fc.nat({ max: 5_000 })
/** An error object as providers put it in a frame. */
const errorBody = fc.record({ message: text, code: fc.constantFrom(400, 'server_error') })

/**
 * The tracked state that decides classes, outcomes and rendered endings. Not compared: how
 * output frames split between the kinds (`counts`, `meta`): the shortcut counts every frame
 * it takes as text, while `quickOutput` may vouch a tool, reasoning or empty delta
 * (StreamAdapter.quickOutput promises "an ordinary output delta", not its kind).
 */
function stateOf(tracker: StreamTracker) {
  const { state } = tracker
  return {
    frames: state.frames,
    bytes: state.bytes,
    keepalives: state.keepalives,
    terminalSeen: state.terminalSeen,
    terminal: state.terminal,
    errors: state.errors,
    firstError: state.firstError,
    openBlocks: [...state.openBlocks],
    lastBlockIndex: state.lastBlockIndex,
    usage: state.usage,
    eof: classifyEof(state),
  }
}

/** What the pump acts on in a verdict's kind: a keep-alive, an error, an end, or neither. */
function actedOn(kind: FrameVerdict['kind']): string {
  return kind === 'keepalive' || kind === 'error' || kind === 'terminal' ? kind : 'output'
}

/** The same frames read twice: every frame inspected, and committed frames through the shortcut. */
function compare(adapter: StreamAdapter, frames: readonly SseFrame[]): number {
  // The shortcut is taken only when no text is kept (Responses keeps it by default).
  const full = createStreamTracker(adapter, { keepTextChars: 0 })
  const fast = createStreamTracker(adapter, { keepTextChars: 0 })
  let shortcuts = 0
  for (const frame of frames) {
    const committed = fast.state.firstContentIndex !== null
    const verdict = full.observe(frame)
    const kind = committed ? fast.observeCommitted(frame) : fast.observe(frame).kind
    if (committed && adapter.quickOutput?.(frame) === true) shortcuts++
    expect(actedOn(kind), new TextDecoder().decode(frame.raw)).toBe(actedOn(verdict.kind))
  }
  expect(stateOf(fast)).toEqual(stateOf(full))
  // What the library would write to end the stream itself says the same (Chat's
  // `tool_calls`, Anthropic's `tool_use` for an answer that was only a tool call), but for the
  // clock and Anthropic's output estimate from frame counts (an empty delta counted as text).
  const stop = (tracker: StreamTracker) =>
    new TextDecoder()
      .decode(adapter.renderStop(tracker.state))
      .replace(/"(created|created_at|output_tokens)":\d+/g, '"$1":0')
  expect(stop(fast)).toBe(stop(full))
  return shortcuts
}

/** A frame of each protocol that looks like an output delta, with what a shortcut could miss. */
const lookalikes: Record<keyof typeof adapters, fc.Arbitrary<string>> = {
  'openai-chat': fc
    .record({
      delta: fc.oneof(
        text.map((content) => ({ content })),
        fc.constant({ role: 'assistant', content: '' }),
        text.map((reasoning_content) => ({ reasoning_content })),
        text.map((args) => ({ tool_calls: [{ index: 0, function: { arguments: args } }] })),
      ),
      finish: fc.constantFrom(null, null, 'stop', 'length'),
      // A second choice (n > 1) that may finish while the first goes on.
      other: fc.option(fc.constantFrom(null, 'stop'), { nil: undefined }),
      native: fc.boolean(),
      usage: fc.option(
        fc.oneof(
          fc.constant(null),
          fc.record({ prompt_tokens: tokens, completion_tokens: tokens, total_tokens: tokens }),
        ),
        { nil: undefined },
      ),
      groq: fc.option(fc.record({ prompt_tokens: tokens, completion_tokens: tokens }), {
        nil: undefined,
      }),
      error: fc.option(errorBody, { nil: undefined, freq: 6 }),
    })
    .map(({ delta, finish, other, native, usage, groq, error }) => {
      const choice = {
        index: 0,
        delta,
        finish_reason: finish,
        ...(native ? { native_finish_reason: finish } : {}),
      }
      const second = { index: 1, delta: { content: '' }, finish_reason: other }
      const body = {
        id: 'gen-1',
        object: 'chat.completion.chunk',
        choices: other === undefined ? [choice] : [choice, second],
        ...(usage === undefined ? {} : { usage }),
        ...(groq === undefined ? {} : { x_groq: { id: 'req_1', usage: groq } }),
        ...(error === undefined ? {} : { error }),
      }
      return `data: ${JSON.stringify(body)}\n\n`
    }),
  gemini: fc
    .record({
      part: fc.oneof(
        text.map((t) => ({ text: t })),
        text.map((t) => ({ text: t, thought: true })),
        fc.constant({ functionCall: { name: 'f', args: {} } }),
      ),
      finish: fc.option(fc.constantFrom('STOP', 'MAX_TOKENS'), { nil: undefined, freq: 4 }),
      usage: fc.option(
        fc.record(
          {
            promptTokenCount: tokens,
            candidatesTokenCount: tokens,
            thoughtsTokenCount: tokens,
            toolUsePromptTokenCount: tokens,
          },
          { requiredKeys: [] },
        ),
        { nil: undefined },
      ),
      error: fc.option(errorBody, { nil: undefined, freq: 6 }),
    })
    .map(({ part, finish, usage, error }) => {
      const candidate = {
        content: { role: 'model', parts: [part] },
        ...(finish === undefined ? {} : { finishReason: finish }),
      }
      const body = {
        candidates: [candidate],
        ...(usage === undefined ? {} : { usageMetadata: usage }),
        ...(error === undefined ? {} : { error }),
      }
      return `data: ${JSON.stringify(body)}\n\n`
    }),
  'anthropic-messages': fc
    .record({
      index: fc.nat({ max: 3 }),
      delta: fc.oneof(
        text.map((t) => ({ type: 'text_delta', text: t })),
        text.map((t) => ({ type: 'thinking_delta', thinking: t })),
        text.map((t) => ({ type: 'input_json_delta', partial_json: t })),
      ),
      usage: fc.option(fc.record({ input_tokens: tokens, output_tokens: tokens }), {
        nil: undefined,
        freq: 4,
      }),
      error: fc.option(errorBody, { nil: undefined, freq: 6 }),
    })
    .map(({ index, delta, usage, error }) => {
      const body = {
        type: 'content_block_delta',
        index,
        delta,
        ...(usage === undefined ? {} : { usage }),
        ...(error === undefined ? {} : { error }),
      }
      return `event: content_block_delta\ndata: ${JSON.stringify(body)}\n\n`
    }),
  'openai-responses': fc
    .record({
      type: fc.constantFrom(
        'response.output_text.delta',
        'response.function_call_arguments.delta',
        'response.reasoning_summary_text.delta',
        'response.refusal.delta',
      ),
      delta: text,
      usage: fc.option(fc.record({ input_tokens: tokens, output_tokens: tokens }), {
        nil: undefined,
        freq: 4,
      }),
      error: fc.option(errorBody, { nil: undefined, freq: 6 }),
    })
    .map(({ type, delta, usage, error }) => {
      const body = {
        type,
        item_id: 'msg_1',
        output_index: 0,
        content_index: 0,
        delta,
        ...(usage === undefined ? {} : { response: { usage } }),
        ...(error === undefined ? {} : { error }),
      }
      return `event: ${type}\ndata: ${JSON.stringify(body)}\n\n`
    }),
}

/** A first output frame of each protocol: after it, frames are read as committed ones. */
const openers: Record<keyof typeof adapters, string> = {
  'openai-chat': `data: ${JSON.stringify({ id: 'gen-1', choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null }] })}\n\n`,
  gemini: `data: ${JSON.stringify({ candidates: [{ content: { role: 'model', parts: [{ text: 'Hi' }] } }] })}\n\n`,
  'anthropic-messages': `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } })}\n\n`,
  'openai-responses': `event: response.output_text.delta\ndata: ${JSON.stringify({ type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Hi' })}\n\n`,
}

describe.each(Object.keys(adapters) as (keyof typeof adapters)[])('%s', (protocol) => {
  const adapter = adapters[protocol]

  it('a fast path gives the full reading’s verdict on every frame: the fixtures', async () => {
    let shortcuts = 0
    for (const fixture of fixtures.filter((f) => f.protocol === protocol)) {
      shortcuts += compare(adapter, await framesOf(fixtureBytes(fixture.file)))
    }
    // The shortcut is taken at all, so the comparison means something.
    expect(shortcuts).toBeGreaterThan(0)
  })

  it('a fast path gives the full reading’s verdict on every frame: generated streams and output lookalikes that carry usage, an error or a finish', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          arbitraries.protocolStream(adapter).map((stream) => stream.bytes),
          fc
            .array(lookalikes[protocol], { maxLength: 8 })
            .map((frames) => encoder.encode(openers[protocol] + frames.join(''))),
          fc
            .tuple(
              arbitraries.protocolStream(adapter).map((stream) => stream.bytes),
              fc.array(lookalikes[protocol], { maxLength: 4 }),
            )
            .map(([bytes, frames]) =>
              concatBytes([
                encoder.encode(openers[protocol]),
                bytes,
                encoder.encode(frames.join('')),
              ]),
            ),
        ),
        async (bytes) => {
          compare(adapter, await framesOf(bytes))
        },
      ),
      { numRuns },
    )
  })
})

describe('mayReportMore', () => {
  const frame = (body: unknown) => encoder.encode(`data: ${JSON.stringify(body)}\n\n`)
  const delta = { index: 0, delta: { content: 'Hi' }, finish_reason: null }

  it('lets an ordinary delta take the shortcut, `"usage":null` (include_usage) and quoted keys in text included', () => {
    expect(mayReportMore(frame({ choices: [delta], usage: null }))).toBe(false)
    expect(
      mayReportMore(
        frame({ choices: [{ ...delta, delta: { content: '"usage": {"error": 1}' } }] }),
      ),
    ).toBe(false)
    expect(mayReportMore(encoder.encode('data: {"usage" : null, "error":null}\n\n'))).toBe(false)
  })

  it('sends a frame with usage, an error or a finish to the full reading', () => {
    expect(mayReportMore(frame({ choices: [delta], usage: { prompt_tokens: 12 } }))).toBe(true)
    expect(
      mayReportMore(frame({ choices: [delta], x_groq: { usage: { prompt_tokens: 1 } } })),
    ).toBe(true)
    expect(
      mayReportMore(encoder.encode('data: {"usageMetadata": {"promptTokenCount": 1}}\n\n')),
    ).toBe(true)
    expect(mayReportMore(frame({ choices: [delta], error: { message: 'x' } }))).toBe(true)
    expect(mayReportMore(frame({ choices: [{ ...delta, finish_reason: 'stop' }] }))).toBe(true)
    expect(mayReportMore(encoder.encode('data: {"finishReason": "STOP"}\n\n'))).toBe(true)
  })
})
