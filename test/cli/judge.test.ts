import { describe, expect, it } from 'vitest'
import { badOutcomes, judgeObservation, type Observation } from '../../src/cli/judge.js'
import {
  anthropicMessages,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import { wireFor } from '../../src/testing/wire.js'

const answer = 'The quick brown fox jumps over the lazy dog.'
const reasoning = 'Let me think about this step by step.'
const adapters: readonly StreamAdapter[] = [
  openaiChat,
  openaiResponses,
  anthropicMessages,
  geminiGenerateContent,
]

const encoder = new TextEncoder()
const words = (text: string) => text.match(/\S+\s*/g) ?? [text]

/** A crafted stream in `adapter`'s protocol, built by the same writer the upstream uses. */
function stream(adapter: StreamAdapter, build: (w: ReturnType<typeof wireFor>) => string[]) {
  return encoder.encode(build(wireFor(adapter)).join(''))
}

const sse = (body: Uint8Array, end: Observation['end'] = 'eof', status = 200): Observation => ({
  status,
  contentType: 'text/event-stream; charset=utf-8',
  body,
  end,
})

const textFrames = (w: ReturnType<typeof wireFor>, text: string) =>
  words(text).flatMap((word) => w.text(word))

const judge = (adapter: StreamAdapter, observation: Observation) =>
  judgeObservation(observation, { adapter, answer, reasoning })

describe.each(adapters)('judge on $name streams', (adapter) => {
  it('full: one attempt, the whole answer, an end event', async () => {
    const body = stream(adapter, (w) => [
      ...w.start(),
      ...textFrames(w, `[attempt 2] ${answer}`),
      ...w.finish('stop'),
    ])
    const judged = await judge(adapter, sse(body))
    expect(judged).toMatchObject({ kind: 'full', attemptsSeen: [2], textChars: answer.length })
  })

  it('honest error: an error event after some output', async () => {
    const body = stream(adapter, (w) => [
      ...w.start(),
      ...textFrames(w, '[attempt 1] The quick'),
      w.error(true, 'overloaded'),
    ])
    const judged = await judge(adapter, sse(body))
    expect(judged.kind).toBe('honest-error')
    expect(judged.reason).toMatch(/error event after 9 answer chars/)
  })

  it('honest error: a non-2xx status', async () => {
    const body = encoder.encode(wireFor(adapter).errorBody('overloaded_error', 'busy', 529))
    const judged = await judge(adapter, {
      status: 529,
      contentType: 'application/json',
      body,
      end: 'eof',
    })
    expect(judged).toMatchObject({ kind: 'honest-error', reason: 'HTTP 529 before any output' })
  })

  it('honest error: the connection failed mid-stream', async () => {
    const body = stream(adapter, (w) => [...w.start(), ...textFrames(w, '[attempt 1] The')])
    const judged = await judge(adapter, { ...sse(body, 'error'), error: 'terminated' })
    expect(judged.kind).toBe('honest-error')
    expect(judged.reason).toMatch(/connection failed after 3 answer chars/)
  })

  it('silent empty: a 200 stream with no frames at all', async () => {
    const judged = await judge(adapter, sse(new Uint8Array()))
    expect(judged).toMatchObject({ kind: 'silent-empty', textChars: 0 })
    expect(badOutcomes.has(judged.kind)).toBe(true)
  })

  it('silent empty: reasoning only, then EOF', async () => {
    const body = stream(adapter, (w) => [
      ...w.start(),
      ...words(`[attempt 1] ${reasoning}`).flatMap((word) => w.reasoning(word)),
    ])
    const judged = await judge(adapter, sse(body))
    expect(judged.kind).toBe('silent-empty')
    expect(judged.reason).toMatch(/reasoning only/)
  })

  it('silent cut: half the answer, a clean EOF, no error', async () => {
    const body = stream(adapter, (w) => [...w.start(), ...textFrames(w, '[attempt 1] The quick ')])
    const judged = await judge(adapter, sse(body))
    expect(judged).toMatchObject({ kind: 'silent-cut', textChars: 10 })
    expect(judged.reason).toMatch(/10 answer chars of 44, no end event, no error/)
  })

  it('silent cut: half the answer, then a synthesized end event', async () => {
    const body = stream(adapter, (w) => [
      ...w.start(),
      ...textFrames(w, '[attempt 1] The quick '),
      ...w.finish('stop'),
    ])
    const judged = await judge(adapter, sse(body))
    expect(judged.kind).toBe('silent-cut')
    expect(judged.reason).toMatch(/, an end event, no error/)
  })

  it('duplicate: output of attempt 1, then the whole answer of attempt 2', async () => {
    const body = stream(adapter, (w) => [
      ...w.start(),
      ...textFrames(w, '[attempt 1] The quick '),
      ...textFrames(w, `[attempt 2] ${answer}`),
      ...w.finish('stop'),
    ])
    const judged = await judge(adapter, sse(body))
    expect(judged).toMatchObject({ kind: 'duplicate', attemptsSeen: [1, 2] })
  })

  it('duplicate: reasoning of attempt 1 and the answer of attempt 2', async () => {
    const body = stream(adapter, (w) => [
      ...w.start(),
      ...w.reasoning(`[attempt 1] ${reasoning}`),
      ...textFrames(w, `[attempt 2] ${answer}`),
      ...w.finish('stop'),
    ])
    expect((await judge(adapter, sse(body))).kind).toBe('duplicate')
  })

  it('duplicate: the same attempt written twice', async () => {
    const body = stream(adapter, (w) => [
      ...w.start(),
      ...textFrames(w, `[attempt 1] ${answer}[attempt 1] ${answer}`),
      ...w.finish('stop'),
    ])
    const judged = await judge(adapter, sse(body))
    expect(judged).toMatchObject({ kind: 'duplicate', reason: 'the same answer twice' })
  })

  it('hang: no end before the bound, even with output', async () => {
    const body = stream(adapter, (w) => [...w.start(), ...textFrames(w, '[attempt 1] The quick')])
    const judged = await judge(adapter, sse(body, 'timeout'))
    expect(judged.kind).toBe('hang')
    expect(judged.reason).toMatch(/9 answer chars so far/)
  })

  it('hang: no response headers at all', async () => {
    const judged = await judge(adapter, {
      status: null,
      contentType: null,
      body: new Uint8Array(),
      end: 'timeout',
    })
    expect(judged).toMatchObject({
      kind: 'hang',
      reason: 'no response headers before the hang bound',
    })
  })

  it('promoted: the reasoning written as the answer', async () => {
    const body = stream(adapter, (w) => [
      ...w.start(),
      ...textFrames(w, `[attempt 1] ${reasoning}`),
      ...w.finish('stop'),
    ])
    expect((await judge(adapter, sse(body))).kind).toBe('promoted')
  })
})

describe('judge on bodies that are not a stream', () => {
  it('a 200 HTML page is a silent failure', async () => {
    const judged = await judge(openaiChat, {
      status: 200,
      contentType: 'text/html',
      body: encoder.encode('<html><title>Service Unavailable</title></html>'),
      end: 'eof',
    })
    expect(judged.kind).toBe('silent-empty')
    expect(judged.reason).toMatch(/200 text\/html with \d+ bytes, not a stream/)
  })

  it("a 200 JSON error body to a streaming request is silent: the SDK's stream yields nothing", async () => {
    const body = encoder.encode(wireFor(anthropicMessages).errorBody('api_error', 'boom', 500))
    const judged = await judge(anthropicMessages, {
      status: 200,
      contentType: 'application/json',
      body,
      end: 'eof',
    })
    expect(judged.kind).toBe('silent-empty')
    expect(judged.reason).toMatch(/a JSON error body, not a stream/)
  })

  it('a connection refused before any response is an honest error', async () => {
    const judged = await judge(openaiChat, {
      status: null,
      contentType: null,
      body: new Uint8Array(),
      end: 'error',
      error: 'connect ECONNREFUSED 127.0.0.1:9',
    })
    expect(judged).toMatchObject({
      kind: 'honest-error',
      reason: expect.stringMatching(/^no response: connect ECONNREFUSED/),
    })
  })
})

describe('judge on OpenAI streams, read where the SDK reads', () => {
  const openai = [openaiChat, openaiResponses]

  it.each(openai.map((adapter) => [adapter.name, adapter] as const))(
    '%s: [DONE] first, then the whole answer, is silent: the SDK stopped at [DONE] (no false ✓)',
    async (_, adapter) => {
      const body = stream(adapter, (w) => [
        'data: [DONE]\n\n',
        ...w.start(),
        ...textFrames(w, `[attempt 1] ${answer}`),
        ...w.finish('stop'),
      ])
      expect((await judge(adapter, sse(body))).kind).toBe('silent-empty')
    },
  )

  it.each(openai.map((adapter) => [adapter.name, adapter] as const))(
    '%s: an error frame after [DONE] does not make a whole answer an error',
    async (_, adapter) => {
      const body = stream(adapter, (w) => [
        ...w.start(),
        ...textFrames(w, `[attempt 1] ${answer}`),
        ...w.finish('stop'),
        'data: [DONE]\n\n',
        w.error(true, 'overloaded'),
      ])
      expect((await judge(adapter, sse(body))).kind).toBe('full')
    },
  )

  it.each(
    openai.flatMap((adapter) =>
      ['{"error":"upstream failed"}', '{"error":true}'].map(
        (json) => [adapter.name, json, adapter] as const,
      ),
    ),
  )(
    '%s: data: %s after output is an honest error (the SDK raises APIError)',
    async (_, json, adapter) => {
      const body = stream(adapter, (w) => [
        ...w.start(),
        ...textFrames(w, '[attempt 1] The quick'),
        `data: ${json}\n\n`,
      ])
      const judged = await judge(adapter, sse(body))
      expect(judged.kind).toBe('honest-error')
    },
  )
})

describe('judge on Anthropic streams', () => {
  it('a bare event: error (no data) after output is an honest error: the SDK raises on it', async () => {
    const body = stream(anthropicMessages, (w) => [
      ...w.start(),
      ...textFrames(w, '[attempt 1] The quick'),
      'event: error\n\n',
    ])
    expect((await judge(anthropicMessages, sse(body))).kind).toBe('honest-error')
  })
})
