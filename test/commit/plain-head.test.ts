/**
 * The head is built as a plain record: a relay into `webSink` (or `nodeSink`) makes no
 * `Headers` of its own for it, and the head still carries the forwarded upstream headers, the
 * SSE defaults and the host's headers. A sink without the record method gets `Headers`.
 */
import { afterEach, describe, expect, it } from 'vitest'
import {
  createCommitGate,
  createMemoryKeyPool,
  openaiChat,
  relay,
  webSink,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { fixtureBytes } from '../protocols/fixtures.js'
import { scriptedUpstream } from '../support/upstream.js'

const Original = globalThis.Headers
let made = 0

afterEach(() => {
  globalThis.Headers = Original
})

describe('the head as a plain record', () => {
  it('a relay into webSink makes no Headers for the head, and the head is whole', async () => {
    const upstream = scriptedUpstream([
      {
        headers: { 'x-request-id': 'req_1', 'openai-organization': 'org-secret' },
        steps: [{ bytes: fixtureBytes('openai-chat/text.sse') }],
      },
    ])
    const { sink, response } = webSink()
    made = 0
    globalThis.Headers = class extends Original {
      constructor(init?: HeadersInit) {
        super(init)
        made++
      }
    }
    const outcome = relay({
      sink,
      pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-test-head-0123456789' }]),
      adapter: openaiChat,
      attempt: upstream.attempt,
      policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
    })
    const answer = await response
    await answer.text()
    await outcome
    globalThis.Headers = Original
    expect(made).toBe(0)
    expect(answer.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    expect(answer.headers.get('x-request-id')).toBe('req_1')
    expect(answer.headers.get('openai-organization')).toBeNull()
  })

  it('a sink without the record method gets the same head as Headers, the host headers winning', async () => {
    const sink = createRecordingSink()
    const gate = createCommitGate(sink, {
      headers: [['Cache-Control', 'no-store']],
      keepAliveIntervalMs: Number.POSITIVE_INFINITY,
    })
    gate.setUpstreamHeaders(new Headers({ 'x-request-id': 'req_2', 'set-cookie': 'a=b' }))
    await gate.write(new TextEncoder().encode('data: {}\n\n'))
    await gate.close()
    const event = sink.events.find((each) => each.type === 'head')
    const head = event?.type === 'head' ? event.headers : undefined
    expect(head).toBeInstanceOf(Headers)
    expect(head?.get('cache-control')).toBe('no-store')
    expect(head?.get('x-request-id')).toBe('req_2')
    expect(head?.get('set-cookie')).toBeNull()
    expect(head?.get('x-accel-buffering')).toBe('no')
  })
})
