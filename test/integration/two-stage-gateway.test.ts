import { createServer } from 'node:http'
import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  createResilientFetch,
  fetchAttempt,
  openaiChat,
  type RelayOutcome,
  relay,
  webSink,
} from '../../src/index.js'
import { finish, role, text } from '../support/chat-frames.js'
import { useLoopback, withBody } from '../support/loopback.js'

/**
 * A two-stage gateway (as `@musistudio/llms` is): the request that goes upstream is Gemini's
 * (`:streamGenerateContent?alt=sse`, no `stream` field in its body), and what the attempt
 * returns is the gateway's unified OpenAI Chat stream, so the relay's adapter is `openaiChat`.
 * Read with `openaiChat`, the body says nothing of a stream; the response does.
 */

const loopback = useLoopback()
const geminiBody = { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }
const answerFrames = [role, text('Hello'), text(' world'), finish]
const wholeAnswer = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  model: 'm',
  choices: [
    { index: 0, message: { role: 'assistant', content: 'Hello world' }, finish_reason: 'stop' },
  ],
}

/** An upstream answering every request as the first stage would: Chat SSE, or Chat JSON. */
async function startUpstream(answer: 'sse' | 'json') {
  const seen: { url: string; body: string }[] = []
  const url = await loopback.listen(
    createServer((req, res) => {
      withBody(req, (body) => {
        seen.push({ url: req.url ?? '', body })
        if (answer === 'json') {
          res.writeHead(200, { 'content-type': 'application/json' })
          res.end(JSON.stringify(wholeAnswer))
          return
        }
        res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' })
        for (const frame of answerFrames) res.write(frame)
        res.end()
      })
    }),
  )
  return { url, seen }
}

const pool = () => createMemoryKeyPool([{ id: 'a', secret: 'sk-two-stage-1234567890' }])

async function relayTwoStage(base: string, options: { stream?: boolean } = {}) {
  const { sink, response } = webSink()
  const outcome: Promise<RelayOutcome> = relay({
    sink,
    pool: pool(),
    adapter: openaiChat,
    request: {
      url: `${base}/v1beta/models/gemini-x:streamGenerateContent?alt=sse`,
      body: geminiBody,
    },
    ...options,
    attempt: fetchAttempt(),
    policy: { backoff: { baseMs: 1, maxMs: 2 } },
  })
  const answered = await response
  return { answered, body: await answered.text(), outcome: await outcome }
}

describe('a two-stage gateway: a Gemini request out, an OpenAI Chat stream back', () => {
  it('relay(): a 2xx event stream is relayed as a stream although the request named none, once', async () => {
    const upstream = await startUpstream('sse')
    const { answered, body, outcome } = await relayTwoStage(upstream.url)
    expect(answered.status).toBe(200)
    expect(answered.headers.get('content-type')).toMatch(/^text\/event-stream/)
    expect(body).toContain('Hello')
    expect(body).toContain('[DONE]')
    expect(outcome).toMatchObject({ kind: 'committed', ok: true, result: 'completed' })
    expect(outcome.attempts).toHaveLength(1)
    expect(upstream.seen).toHaveLength(1)
    // The request went out as the host built it: no `stream` field added to Gemini's body.
    expect(JSON.parse(upstream.seen[0]?.body ?? '{}')).toEqual(geminiBody)
  })

  it('relay(): the same request answered with JSON is a whole answer, as it came', async () => {
    const upstream = await startUpstream('json')
    const { answered, body, outcome } = await relayTwoStage(upstream.url)
    expect(answered.status).toBe(200)
    expect(answered.headers.get('content-type')).toMatch(/^application\/json/)
    expect(JSON.parse(body)).toEqual(wholeAnswer)
    expect(outcome).toMatchObject({ kind: 'committed', ok: true })
  })

  it('relay(): `stream: false` stated by the host is kept: an event stream is not a whole answer', async () => {
    const upstream = await startUpstream('sse')
    const { answered, outcome } = await relayTwoStage(upstream.url, { stream: false })
    expect(answered.status).toBe(502)
    expect(outcome).toMatchObject({ kind: 'failed', result: 'failed' })
  })

  it('createResilientFetch: the same request through the fetch wrapper streams too', async () => {
    const upstream = await startUpstream('sse')
    const outcomes: RelayOutcome[] = []
    const fetch = createResilientFetch({
      adapter: openaiChat,
      pool: pool(),
      policy: { backoff: { baseMs: 1, maxMs: 2 } },
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    const answered = await fetch(
      `${upstream.url}/v1beta/models/gemini-x:streamGenerateContent?alt=sse`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(geminiBody),
      },
    )
    expect(answered.status).toBe(200)
    const body = await answered.text()
    expect(body).toContain(' world')
    expect(body).toContain('[DONE]')
    await expect.poll(() => outcomes.length).toBe(1)
    expect(outcomes[0]).toMatchObject({ kind: 'committed', ok: true, attempts: [{}] })
    expect(upstream.seen).toHaveLength(1)
  })
})
