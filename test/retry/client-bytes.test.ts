/**
 * The client's bytes go upstream as they came when the relay did not change the request: a
 * body read with `keepClientBytes` (by `readClientRequest` or its Node twin `readNodeRequest`)
 * is frozen with its bytes, and a ready attempt (`fetchAttempt` or its twin `nodeHttpAttempt`)
 * that sends that very body sends those bytes (key order, spacing and escapes kept). Any other
 * body — adjusted by the relay, built anew by the host, changed in place when not frozen — is
 * serialised, so what goes upstream is always what the request says.
 */

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, request as httpRequest } from 'node:http'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import {
  createMemoryKeyPool,
  fetchAttempt,
  openaiChat,
  readClientRequest,
  relay,
} from 'stream-boundary'
import type { ReadyAttempt } from 'stream-boundary/advanced'
import { nodeHttpAttempt, readNodeRequest } from 'stream-boundary/node'
import { createRecordingSink } from 'stream-boundary/testing'
import { describe, expect, it } from 'vitest'
import { attemptRequest } from '../../src/retry/request/ready-attempt.js'
import { useLoopback, withBody } from '../support/loopback.js'
import { runs } from '../support/runs.js'

const loopback = useLoopback()

const chatAnswer = [
  'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n',
  'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
  'data: [DONE]\n\n',
].join('')

/** An upstream that answers `answer(n)` and records each request body it got, as text. */
async function recordingUpstream(answer: (n: number) => { status: number; body: string }) {
  const received: string[] = []
  const server = createServer((req, res) => {
    withBody(req, (body) => {
      received.push(body)
      const { status, body: out } = answer(received.length)
      const type = status === 200 ? 'text/event-stream' : 'application/json'
      res.writeHead(status, { 'content-type': type }).end(out)
    })
  })
  return { url: await loopback.listen(server), received }
}

type Read = (text: string, keepClientBytes?: boolean) => Promise<Record<string, unknown>>

/** `readClientRequest` over a web `Request`. */
const viaWeb: Read = async (text, keepClientBytes = true) => {
  const request = new Request('http://gateway/v1/chat/completions', { method: 'POST', body: text })
  const read = await readClientRequest(request, { adapter: openaiChat, keepClientBytes })
  if (!read.ok) throw new Error(`refused: ${await read.response.text()}`)
  return read.body
}

/** `readNodeRequest` on a real server, the client's bytes sent in two writes. */
const viaNode: Read = async (text, keepClientBytes = true) => {
  let body: Record<string, unknown> | undefined
  const server = createServer(async (req, res) => {
    body = await readNodeRequest(req, res, { adapter: openaiChat, keepClientBytes })
    if (body !== undefined) res.writeHead(204).end()
  })
  const url = await loopback.listen(server)
  await new Promise<void>((resolve, reject) => {
    const req = httpRequest(`${url}/v1/chat/completions`, { method: 'POST' }, (res) => {
      res.resume()
      res.on('end', resolve)
    })
    req.on('error', reject)
    const bytes = Buffer.from(text)
    req.write(bytes.subarray(0, 7))
    req.end(bytes.subarray(7))
  })
  if (body === undefined) throw new Error('the Node reader refused the request')
  return body
}

// Key order, spacing and an escape no serialiser would write the same way.
const clientText =
  '{ "stream" : true,\n  "model":"gpt-test",\t"messages":[{"content":"h\\u00e9 \u2713 \\/","role":"user"}] }'

const attempts: readonly [string, () => ReadyAttempt][] = [
  ['fetchAttempt', () => fetchAttempt()],
  ['nodeHttpAttempt', () => nodeHttpAttempt()],
]
const readers: readonly [string, Read][] = [
  ['readClientRequest', viaWeb],
  ['readNodeRequest', viaNode],
]
const twins = attempts.flatMap(([attemptName, attempt]) =>
  readers.map(([readerName, read]) => [`${attemptName}, ${readerName}`, attempt, read] as const),
)

function relayTo(url: string, body: Record<string, unknown>, attempt: ReadyAttempt, policy = {}) {
  return relay({
    sink: createRecordingSink(),
    adapter: openaiChat,
    pool: createMemoryKeyPool([{ id: 'k', secret: 'sk-test-1' }]),
    request: { url: `${url}/v1/chat/completions`, body },
    policy,
    attempt,
  })
}

describe.each(twins)('%s', (_name, attempt, read) => {
  it("an unchanged request read with keepClientBytes goes upstream as the client's exact bytes", async () => {
    const upstream = await recordingUpstream(() => ({ status: 200, body: chatAnswer }))
    const body = await read(clientText)
    const outcome = await relayTo(upstream.url, body, attempt())
    expect(outcome.ok).toBe(true)
    expect(upstream.received).toEqual([clientText])
  })

  it('a retry of the unchanged request sends the same bytes again', async () => {
    const upstream = await recordingUpstream((n) =>
      n === 1
        ? { status: 503, body: '{"error":{"message":"busy"}}' }
        : { status: 200, body: chatAnswer },
    )
    const body = await read(clientText)
    const outcome = await relayTo(upstream.url, body, attempt(), { backoff: { baseMs: 1 } })
    expect(outcome.ok).toBe(true)
    expect(upstream.received).toEqual([clientText, clientText])
  })

  it("a request the relay adjusted is serialised: the adjusted body goes, not the client's bytes", async () => {
    const refusal = JSON.stringify({ error: { type: 'invalid_request_error', message: 'no' } })
    const upstream = await recordingUpstream((n) =>
      n === 1 ? { status: 400, body: refusal } : { status: 200, body: chatAnswer },
    )
    const body = await read(clientText)
    const outcome = await relayTo(upstream.url, body, attempt(), {
      adjustRequest: ({ request }: { request: { body: Record<string, unknown> } }) => ({
        ...request.body,
        max_tokens: 7,
      }),
    })
    expect(outcome.ok).toBe(true)
    expect(upstream.received[0]).toBe(clientText)
    expect(upstream.received[1]).toBe(JSON.stringify({ ...JSON.parse(clientText), max_tokens: 7 }))
  })

  it('a host that changes context.request in place (no keepClientBytes) sends its change', async () => {
    const upstream = await recordingUpstream(() => ({ status: 200, body: chatAnswer }))
    const body = await read(clientText, false)
    const ready = attempt()
    const outcome = await relayTo(upstream.url, body, (context) => {
      ;(context.request?.body as Record<string, unknown>).model = 'gpt-other'
      return ready(context)
    })
    expect(outcome.ok).toBe(true)
    expect(upstream.received).toHaveLength(1)
    expect(JSON.parse(upstream.received[0] as string)).toEqual({
      ...JSON.parse(clientText),
      model: 'gpt-other',
    })
  })

  it('a body kept with its bytes cannot change in place; a new body from the host is sent as it is', async () => {
    const body = await read(clientText)
    expect(() => {
      body.model = 'gpt-other'
    }).toThrow(TypeError)
    expect(() => {
      ;(body.messages as { content: string }[]).forEach((message) => {
        message.content = 'changed'
      })
    }).toThrow(TypeError)
    const upstream = await recordingUpstream(() => ({ status: 200, body: chatAnswer }))
    const ready = attempt()
    const outcome = await relayTo(upstream.url, body, (context) =>
      ready({
        ...context,
        request: { url: context.request?.url, body: { ...body, model: 'gpt-other' } },
      }),
    )
    expect(outcome.ok).toBe(true)
    expect(upstream.received).toEqual([
      JSON.stringify({ ...JSON.parse(clientText), model: 'gpt-other' }),
    ])
  })
})

/**
 * Host code in sloppy mode: a CommonJS file without "use strict", as many Express apps are.
 * There a plain frozen object ignores an assignment in silence; the docs promise a TypeError.
 */
function sloppyHost(): Record<string, (body?: unknown) => unknown> {
  const dir = mkdtempSync(join(tmpdir(), 'sloppy-host-'))
  const file = join(dir, 'host.cjs')
  writeFileSync(
    file,
    [
      '// No "use strict": this module runs in sloppy mode.',
      'exports.isSloppy = function () { return this === undefined ? false : true }',
      "exports.setModel = function (body) { body.model = 'gpt-other'; return body.model }",
      "exports.addField = function (body) { body.user = 'u1'; return body.user }",
      "exports.setContent = function (body) { body.messages[0].content = 'changed'; return body.messages[0].content }",
      "exports.pushMessage = function (body) { body.messages[1] = { role: 'user', content: 'x' }; return body.messages.length }",
      'exports.dropModel = function (body) { delete body.model; return body.model }',
      "exports.redefine = function (body) { Object.defineProperty(body, 'model', { value: 'x' }) }",
    ].join('\n'),
  )
  try {
    return createRequire(import.meta.url)(file)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

describe.each([
  ['readClientRequest', viaWeb],
  ['readNodeRequest', viaNode],
] as const)('keepClientBytes in sloppy-mode host code (%s)', (_name, read) => {
  it('every change to a kept body throws a TypeError, in sloppy mode as in strict', async () => {
    const host = sloppyHost()
    expect(host.isSloppy?.()).toBe(true)
    const text = JSON.stringify({
      model: 'm',
      stream: true,
      messages: [{ role: 'user', content: 'hi' }],
    })
    for (const change of [
      'setModel',
      'addField',
      'setContent',
      'pushMessage',
      'dropModel',
      'redefine',
    ]) {
      const body = await read(text)
      expect(() => host[change]?.(body), change).toThrow(TypeError)
      // Unchanged, and still sent as the client's bytes.
      expect(JSON.stringify(body)).toBe(text)
      expect(
        new TextDecoder().decode(
          attemptRequest(
            {
              key: undefined,
              adapter: openaiChat,
              request: { url: 'http://upstream/v1/chat/completions', body },
              requestId: undefined,
            },
            {},
          ).body as Uint8Array,
        ),
      ).toBe(text)
    }
  })
})

describe('keepClientBytes', () => {
  const context = (body: unknown) => ({
    key: undefined,
    adapter: openaiChat,
    request: { url: 'http://upstream/v1/chat/completions', body },
    requestId: undefined,
  })

  it('a body read with keepClientBytes is frozen all the way down, and only that very body carries the bytes', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 6 }),
        fc.integer({ min: 0, max: 3 }),
        async (value, indent) => {
          const text = JSON.stringify({ ...value, model: 'm' }, null, indent)
          const body = await viaWeb(text)
          const pending: unknown[] = [body]
          for (let each = pending.pop(); each !== undefined; each = pending.pop()) {
            if (typeof each !== 'object' || each === null) continue
            expect(Object.isFrozen(each)).toBe(true)
            pending.push(...Object.values(each))
          }
          expect(
            new TextDecoder().decode(attemptRequest(context(body), {}).body as Uint8Array),
          ).toBe(text)
          // A copy is a body of its own: serialised, never sent as the client's bytes.
          expect(attemptRequest(context({ ...body }), {}).body).toBe(JSON.stringify(body))
          const copy = JSON.parse(JSON.stringify(body))
          expect(attemptRequest(context(copy), {}).body).toBe(JSON.stringify(body))
        },
      ),
      { numRuns: runs(50) },
    )
  })

  it('a byte order mark is not sent on; the body is what the client wrote after it', async () => {
    const body = await viaWeb(`\ufeff${clientText}`)
    expect(new TextDecoder().decode(attemptRequest(context(body), {}).body as Uint8Array)).toBe(
      clientText,
    )
  })

  it('without keepClientBytes the body is not frozen and is serialised', async () => {
    const body = await viaWeb(clientText, false)
    expect(Object.isFrozen(body)).toBe(false)
    expect(attemptRequest(context(body), {}).body).toBe(JSON.stringify(body))
  })

  it('refuses a keepClientBytes that is not a boolean, naming it', async () => {
    const request = new Request('http://gateway/v1', { method: 'POST', body: clientText })
    await expect(
      readClientRequest(request, { adapter: openaiChat, keepClientBytes: 'yes' as never }),
    ).rejects.toThrow('readClientRequest: keepClientBytes must be a boolean, got string')
  })
})
