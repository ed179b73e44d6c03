import { describe, expect, it, vi } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  openaiChat,
  type RelayOutcome,
  relay,
} from '../../src/index.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { type Behaviour, scriptedUpstream } from '../support/upstream.js'

/**
 * A give-up after the upstream answered 2xx and then stated an error (in the stream, or as a
 * whole JSON answer) keeps the request ids of the attempt whose error it gives: the client
 * can quote them to the provider, as it can for an HTTP error passed on.
 */

const keys = [
  { id: 'a', secret: 'sk-give-up-a-0123456789' },
  { id: 'b', secret: 'sk-give-up-b-0123456789' },
]

const frame = (type: string, message: string) =>
  `data: ${JSON.stringify({ error: { message, type } })}\n\n`
const json = (type: string, message: string) => JSON.stringify({ error: { message, type } })

/** An answer with status 200, the given request ids, and `body` (a stream, or JSON). */
function answered(ids: Record<string, string>, body: string, stream: boolean): Behaviour {
  return {
    headers: {
      'content-type': stream ? 'text/event-stream' : 'application/json',
      'openai-organization': 'org-secret-account',
      ...ids,
    },
    steps: [{ bytes: body }],
  }
}

/** The ids each attempt answers with, and the error it states: retryable, then fatal. */
function script(stream: boolean): Behaviour[] {
  const say = stream ? frame : json
  return [
    answered({ 'x-request-id': 'req_first' }, say('server_error', 'overloaded'), stream),
    answered(
      { 'x-request-id': 'req_second', 'request-id': 'rid_second' },
      say('invalid_request_error', 'the prompt is too long'),
      stream,
    ),
  ]
}

interface Seen {
  status: number
  headers: Headers
  body: string
  outcome: RelayOutcome | undefined
}

async function viaRelay(stream: boolean, translated: boolean): Promise<Seen> {
  const sink = createRecordingSink()
  const upstream = scriptedUpstream(script(stream))
  const outcome = await relay({
    sink,
    pool: createMemoryKeyPool(keys),
    adapter: openaiChat,
    attempt: upstream.attempt,
    request: { url: 'http://upstream.test/v1/chat/completions', body: { stream, messages: [] } },
    policy: {
      backoff: { baseMs: 1, maxMs: 2 },
      // A translator is required beside a client adapter of another protocol; this request
      // gives up before commit, so it never runs.
      ...(translated
        ? { downstream: { adapter: anthropicMessages, transform: (frame) => frame.raw } }
        : {}),
    },
  })
  const head = sink.events.find((event) => event.type === 'head')
  const headers = head?.type === 'head' ? head.headers : new Headers()
  return { status: sink.status ?? 0, headers, body: sink.text, outcome }
}

async function viaFetch(stream: boolean): Promise<Seen> {
  const answers = script(stream)
  let outcome: RelayOutcome | undefined
  let call = 0
  const fetch = createResilientFetch({
    pool: createMemoryKeyPool(keys),
    policy: { backoff: { baseMs: 1, maxMs: 2 } },
    onOutcome: (o) => {
      outcome = o
    },
    fetch: async () => {
      const { headers, steps } = answers[Math.min(call++, answers.length - 1)] as Behaviour
      const body = steps?.map((step) => ('bytes' in step ? String(step.bytes) : '')).join('')
      return new Response(body, { status: 200, headers: headers ?? {} })
    },
  })
  const response = await fetch('http://upstream.test/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream, messages: [] }),
  })
  const body = await response.text()
  await vi.waitFor(() => expect(outcome).toBeDefined())
  return { status: response.status, headers: response.headers, body, outcome }
}

// A stream's error frame is the upstream's word (400 for a request it refuses); a JSON error
// served as a whole 2xx answer is an upstream fault (502), retried like its streaming twin.
describe.each([
  ['relay(), streaming', 400, () => viaRelay(true, false)],
  ['relay(), non-streaming', 502, () => viaRelay(false, false)],
  ['relay(), streaming translated to Anthropic', 400, () => viaRelay(true, true)],
  ['createResilientFetch, streaming', 400, () => viaFetch(true)],
  ['createResilientFetch, non-streaming', 502, () => viaFetch(false)],
])('a 2xx that states an error, through %s', (_, status, run) => {
  it('gives up with the request ids of the attempt whose error it gives, and no account ids', async () => {
    const seen = await run()
    expect(seen.outcome).toMatchObject({ kind: 'failed', status })
    expect(seen.status).toBe(status)
    expect(seen.body).toContain('the prompt is too long')
    expect(seen.headers.get('x-request-id')).toBe('req_second')
    expect(seen.headers.get('request-id')).toBe('rid_second')
    expect(seen.headers.get('openai-organization')).toBeNull()
    expect(seen.headers.get('x-should-retry')).toBe('false')
  })
})
