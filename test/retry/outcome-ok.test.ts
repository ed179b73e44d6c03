import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createResilientFetch,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
  webSink,
} from '../../src/index.js'
import type { Scenario } from '../../src/testing/faults.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'
import { finish, role, text } from '../support/chat-frames.js'

/**
 * `outcome.ok` is true only when the client got a complete answer. Every way a request ends
 * is driven here, and `ok` is checked against the expected value and against what the client
 * itself read: a complete answer ends with the protocol's final event and carries no error.
 */

const encoder = new TextEncoder()
const error = 'data: {"error":{"type":"server_error","message":"the model failed"}}\n\n'
const reasoning = (content: string) =>
  `data: {"choices":[{"index":0,"delta":{"reasoning_content":"${content}"},"finish_reason":null}]}\n\n`

/** An upstream body of these frames; with `hold`, it stays open after them. */
function sse(frames: readonly string[], hold = false): Response {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const frame of frames) controller.enqueue(encoder.encode(frame))
      if (!hold) controller.close()
    },
  })
  return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
}

interface RelayCase {
  readonly name: string
  readonly frames: readonly string[]
  readonly hold?: boolean
  readonly policy?: RelayPolicy
  /** How the host or the client ends it: abort the host's signal, or cancel the body, mid-answer. */
  readonly stop?: 'host-abort' | 'client-cancel' | 'host-abort-before-output'
  /**
   * The policy closed an answer the upstream never finished: the client reads a clean end the
   * library wrote, yet the answer is not complete (`ok` is false).
   */
  readonly cleanEndWritten?: boolean
  readonly expected: {
    kind: RelayOutcome['kind']
    end?: string
    ok: boolean
    result: RelayOutcome['result']
  }
}

const relayCases: readonly RelayCase[] = [
  {
    name: 'a stream that ends with its final event',
    frames: [role, text('Hi'), finish],
    expected: { kind: 'committed', end: 'completed', ok: true, result: 'completed' },
  },
  {
    name: 'output, then the upstream’s own error frame',
    frames: [role, text('Hi'), error],
    expected: { kind: 'committed', end: 'upstream-error', ok: false, result: 'cut' },
  },
  {
    name: 'output, then EOF without the final event (the honest error)',
    frames: [role, text('Hi')],
    expected: { kind: 'committed', end: 'error-written', ok: false, result: 'cut' },
  },
  {
    name: 'output, then EOF, closed by a synthesized stop',
    frames: [role, text('Hi')],
    policy: { onPartialEof: 'synthesize-stop' },
    cleanEndWritten: true,
    expected: { kind: 'committed', end: 'stop-synthesized', ok: false, result: 'cut' },
  },
  {
    name: 'reasoning only, promoted to the answer',
    frames: [role, reasoning('thinking')],
    policy: { onThinkingOnly: 'promote-reasoning' },
    cleanEndWritten: true,
    expected: { kind: 'committed', end: 'reasoning-promoted', ok: false, result: 'cut' },
  },
  {
    name: 'the host aborts mid-answer',
    frames: [role, text('Hi')],
    hold: true,
    stop: 'host-abort',
    expected: { kind: 'committed', end: 'aborted', ok: false, result: 'aborted' },
  },
  {
    name: 'the client cancels the body mid-answer',
    frames: [role, text('Hi')],
    hold: true,
    stop: 'client-cancel',
    expected: { kind: 'committed', end: 'client-gone', ok: false, result: 'client-gone' },
  },
  {
    name: 'the host aborts before any output',
    frames: [role],
    hold: true,
    stop: 'host-abort-before-output',
    expected: { kind: 'client-gone', ok: false, result: 'client-gone' },
  },
  {
    name: 'every attempt empty: a give-up',
    frames: [role],
    policy: { maxAttempts: 2 },
    expected: { kind: 'failed', ok: false, result: 'failed' },
  },
]

/** One request through `relay()` over a `webSink()`; what the client read, and the outcome. */
async function relayCase(each: RelayCase): Promise<{ read: string | null; outcome: RelayOutcome }> {
  const host = new AbortController()
  const { sink, response } = webSink()
  const relayed = relay({
    sink,
    adapter: openaiChat,
    signal: host.signal,
    ...(each.policy === undefined ? {} : { policy: each.policy }),
    attempt: async () => {
      if (each.stop === 'host-abort-before-output') setTimeout(() => host.abort(), 5)
      return sse(each.frames, each.hold)
    },
  })
  const read = (async () => {
    try {
      const body = (await response).body as ReadableStream<Uint8Array>
      const reader = body.getReader()
      let got = ''
      for (;;) {
        const { done, value } = await reader.read()
        if (done) return got
        got += new TextDecoder().decode(value)
        if (each.stop === 'host-abort' && got.includes('Hi')) host.abort()
        if (each.stop === 'client-cancel' && got.includes('Hi')) {
          await reader.cancel()
          return null
        }
      }
    } catch {
      return null
    }
  })()
  const outcome = await relayed
  return { read: await read, outcome }
}

/** A complete answer as an OpenAI Chat client sees it: the final event, no error frame. */
const completeChat = (read: string | null) =>
  read?.includes('[DONE]') === true && !read.includes('"error"')

describe('outcome.ok: true only when the client got a complete answer; outcome.result names how it ended', () => {
  it.each(relayCases)('relay(), $name', async (each) => {
    const { read, outcome } = await relayCase(each)
    expect(outcome.kind).toBe(each.expected.kind)
    expect(outcome.result).toBe(each.expected.result)
    expect(outcome.result === 'completed').toBe(outcome.ok)
    if (outcome.kind === 'committed') expect(outcome.end.kind).toBe(each.expected.end)
    expect(outcome.ok).toBe(each.expected.ok)
    expect(completeChat(read)).toBe(outcome.ok || each.cleanEndWritten === true)
  })

  const faultCases: readonly {
    name: string
    url: string
    scenario: Scenario
    stream: boolean
    policy?: RelayPolicy
    expected: {
      kind: RelayOutcome['kind']
      end?: string
      ok: boolean
      result: RelayOutcome['result']
      continuation?: string
    }
  }[] = [
    {
      name: 'a whole (non-streaming) answer',
      url: 'https://api.test/v1/chat/completions',
      scenario: ['ok'],
      stream: false,
      expected: { kind: 'committed', end: 'completed', ok: true, result: 'completed' },
    },
    {
      name: 'a whole answer, every attempt rate limited: a give-up',
      url: 'https://api.test/v1/chat/completions',
      scenario: ['rate-limited'],
      stream: false,
      policy: { maxAttempts: 2 },
      expected: { kind: 'failed', ok: false, result: 'failed' },
    },
    {
      name: 'a request the upstream refuses (its 400 passed on): refused, not failed',
      url: 'https://api.test/v1/chat/completions',
      scenario: [{ kind: 'context-overflow', inputTokens: 200_000 }],
      stream: true,
      expected: { kind: 'failed', ok: false, result: 'refused' },
    },
    {
      name: 'a cut healed by a continuation that completed',
      url: 'https://api.test/v1/messages',
      scenario: ['partial-then-cut', 'ok'],
      stream: true,
      policy: { continueAfterCut: true },
      expected: {
        kind: 'committed',
        end: 'completed',
        ok: true,
        result: 'completed',
        continuation: 'spliced',
      },
    },
    {
      name: 'a cut whose continuation failed',
      url: 'https://api.test/v1/messages',
      scenario: ['partial-then-cut', 'fatal-error-frame'],
      stream: true,
      policy: { continueAfterCut: true },
      expected: {
        kind: 'committed',
        end: 'error-written',
        ok: false,
        result: 'cut',
        continuation: 'failed',
      },
    },
  ]

  it.each(faultCases)('createResilientFetch, $name', async (each) => {
    const upstream = createFaultyUpstream({ scenarios: { s: each.scenario } })
    let outcome: RelayOutcome | undefined
    const fetch = createResilientFetch({
      fetch: upstream.fetch,
      pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-ok-test-1234567890' }]),
      ...(each.policy === undefined ? {} : { policy: each.policy }),
      onOutcome: (ended) => {
        outcome = ended
      },
    })
    const response = await fetch(each.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-fault-scenario': 's' },
      body: JSON.stringify({
        model: 'm',
        max_tokens: 64,
        messages: [{ role: 'user', content: 'hi' }],
        stream: each.stream,
      }),
    })
    const read = await response.text()
    await expect.poll(() => outcome).toBeDefined()
    const ended = outcome as RelayOutcome
    expect(ended.kind).toBe(each.expected.kind)
    expect(ended.result).toBe(each.expected.result)
    if (ended.kind === 'committed') {
      expect(ended.end.kind).toBe(each.expected.end)
      expect(ended.continuations?.[0]?.result).toBe(each.expected.continuation)
    }
    expect(ended.ok).toBe(each.expected.ok)
    // What the client read agrees: a final event (or a whole 2xx answer) and no error.
    const complete = each.stream
      ? read.includes('message_stop') && !read.includes('event: error')
      : response.ok && !read.includes('"error"')
    expect(ended.ok).toBe(complete)
  })
})
