/**
 * What a hostile or slow client, or a body parser in front, can do to the request readers:
 * `readClientRequest` (web `Request`) and its twin `readNodeRequest` (a real node:http server).
 * A body nested past `maxJsonDepth` is a 400 that never reaches anything that recurses; a body
 * that trickles in past `requestBodyTimeoutMs` is a 408 on time; a body some other code read
 * first is used when it was handed over and named when it was not, never a wait; every refusal
 * leaves a record a host can log.
 */

import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http'
import {
  anthropicMessages,
  openaiChat,
  readClientRequest,
  type StreamAdapter,
} from 'stream-boundary'
import { type ClientRequestRefusal, requestBodyDefaults } from 'stream-boundary/advanced'
import { type ReadNodeRequestOptions, readNodeRequest } from 'stream-boundary/node'
import { describe, expect, it } from 'vitest'
import { useLoopback } from '../support/loopback.js'

const loopback = useLoopback()
const utf8 = (text: string) => new TextEncoder().encode(text)

/** The body: 12 KB, nested 6,000 deep. */
const deepBody = `{"model":"m","stream":true,"messages":[],"x":${'['.repeat(6_000)}${']'.repeat(6_000)}}`

/** A body whose deepest value sits at `depth` (the top-level object is depth 1). */
function nestedTo(depth: number): string {
  return `{"model":"m","messages":[],"x":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`
}

interface Answer {
  readonly status: number
  readonly body: string
  readonly read: Record<string, unknown> | undefined
  readonly refusal: ClientRequestRefusal | undefined
  readonly ms: number
}

type Extra = Partial<Omit<ReadNodeRequestOptions, 'adapter'>>

/** Chunks written `gapMs` apart (a slow client when the gap is long). */
function slowStream(chunks: readonly Uint8Array[], gapMs: number) {
  let index = 0
  const state = { cancelled: false }
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (index > 0) await new Promise((resume) => setTimeout(resume, gapMs))
      const chunk = chunks[index++]
      if (chunk === undefined) controller.close()
      else controller.enqueue(chunk)
    },
    cancel() {
      state.cancelled = true
    },
  })
  return { stream, state }
}

async function viaWeb(
  adapter: StreamAdapter,
  chunks: readonly Uint8Array[],
  extra: Extra = {},
  gapMs = 0,
): Promise<Answer> {
  const started = performance.now()
  const request = new Request('http://gateway/v1', {
    method: 'POST',
    body: slowStream(chunks, gapMs).stream,
    duplex: 'half',
  } as RequestInit)
  const read = await readClientRequest(request, { adapter, ...extra })
  const ms = performance.now() - started
  if (read.ok) return { status: 200, body: '', read: read.body, refusal: undefined, ms }
  return {
    status: read.response.status,
    body: await read.response.text(),
    read: undefined,
    refusal: read.refusal,
    ms,
  }
}

/**
 * The Node twin over a real server, chunks written `gapMs` apart; `before` runs in the handler
 * before the reader (a body parser in front).
 */
async function viaNode(
  adapter: StreamAdapter,
  chunks: readonly Uint8Array[],
  extra: Extra = {},
  gapMs = 5,
  before?: (req: IncomingMessage) => Promise<Extra | undefined>,
): Promise<Answer> {
  let read: Record<string, unknown> | undefined
  let refusal: ClientRequestRefusal | undefined
  const server = createServer(async (req, res) => {
    const more = (await before?.(req)) ?? {}
    read = await readNodeRequest(req, res, {
      adapter,
      ...extra,
      ...more,
      onRefused: (what) => {
        refusal = what
      },
    })
    if (read !== undefined) res.writeHead(200).end()
  })
  const url = await loopback.listen(server)
  const started = performance.now()
  return new Promise((resolve, reject) => {
    let answered = false
    const req = httpRequest(`${url}/v1`, { method: 'POST' }, (res) => {
      answered = true
      const ms = performance.now() - started
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        body += chunk
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, read, refusal, ms }))
    })
    // A server that stopped reading may reset a client still writing: after its answer, fine.
    req.on('error', (error) => {
      if (!answered) reject(error)
    })
    const write = async () => {
      for (const chunk of chunks) {
        if (answered || req.destroyed) return
        req.write(chunk)
        await new Promise((resume) => setTimeout(resume, gapMs))
      }
      if (!answered) req.end()
    }
    void write()
  })
}

const twins = [
  ['readClientRequest (web Request)', viaWeb],
  ['readNodeRequest (node:http)', viaNode],
] as const

describe.each(twins)('%s: JSON nesting depth', (_name, via) => {
  it("the issue's 12 KB body nested 6,000 deep is a 400 naming the bound, handed on to nothing", async () => {
    const answer = await via(openaiChat, [utf8(deepBody)])
    expect(answer.status).toBe(400)
    expect(answer.read).toBeUndefined()
    const error = (JSON.parse(answer.body) as { error: { message: string; code: string } }).error
    expect(error.message).toMatch(/nested deeper than this gateway accepts \(128 levels\)/)
    expect(error.code).toBe('request_too_deep')
    expect(answer.refusal).toMatchObject({ kind: 'refused', status: 400, reason: 'too-deep' })
  })

  it('in the Anthropic protocol too: an invalid_request_error', async () => {
    const answer = await via(anthropicMessages, [utf8(deepBody)])
    expect(answer.status).toBe(400)
    const json = JSON.parse(answer.body) as { type: string; error: { type: string } }
    expect(json).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } })
  })

  it('the bound is exact: 128 levels pass, 129 are refused; a smaller maxJsonDepth is honoured', async () => {
    expect(requestBodyDefaults.maxJsonDepth).toBe(128)
    expect((await via(openaiChat, [utf8(nestedTo(128))])).status).toBe(200)
    expect((await via(openaiChat, [utf8(nestedTo(129))])).status).toBe(400)
    expect((await via(openaiChat, [utf8(nestedTo(10))], { maxJsonDepth: 10 })).status).toBe(200)
    expect((await via(openaiChat, [utf8(nestedTo(11))], { maxJsonDepth: 10 })).status).toBe(400)
  })

  it('brackets inside strings (and escaped quotes) are text, not nesting', async () => {
    const content = `\\"${'[{'.repeat(3_000)}\\\\`
    const body = `{"model":"m","messages":[{"role":"user","content":"${content}"}]}`
    const answer = await via(openaiChat, [utf8(body)])
    expect(answer.status).toBe(200)
    const messages = answer.read?.messages as { content: string }[]
    expect(messages[0]?.content).toBe(JSON.parse(`"${content}"`))
  })

  it('a depth split across chunks is counted whole', async () => {
    const bytes = utf8(nestedTo(200))
    const answer = await via(openaiChat, [
      bytes.slice(0, 100),
      bytes.slice(100, 250),
      bytes.slice(250),
    ])
    expect(answer.status).toBe(400)
  })
})

describe.each(twins)('%s: time bound on the body', (_name, via) => {
  it('a client sending 1 byte per 100 ms past a 400 ms bound gets its 408 on time', async () => {
    const bytes = [...utf8('{"model":"m","messages":[],"stream":true}')].map((b) =>
      Uint8Array.of(b),
    )
    const answer = await via(anthropicMessages, bytes, { requestBodyTimeoutMs: 400 }, 100)
    expect(answer.status).toBe(408)
    expect(answer.ms).toBeGreaterThanOrEqual(390)
    expect(answer.ms).toBeLessThan(400 + 300)
    const json = JSON.parse(answer.body) as { error: { type: string; message: string } }
    expect(json.error.type).toBe('timeout_error')
    expect(json.error.message).toMatch(/did not arrive within 400 ms/)
    expect(answer.refusal).toMatchObject({ kind: 'refused', status: 408, reason: 'timeout' })
  })

  it('a body that arrives within the bound is read as usual', async () => {
    const answer = await via(openaiChat, [utf8('{"model":"m",'), utf8('"stream":true}')], {
      requestBodyTimeoutMs: 2_000,
    })
    expect(answer.status).toBe(200)
    expect(answer.read).toEqual({ model: 'm', stream: true })
  })

  it('the default bound is 60 s', () => {
    expect(requestBodyDefaults.requestBodyTimeoutMs).toBe(60_000)
  })
})

describe('the time bound leaves nothing behind', () => {
  const timeouts = () =>
    process.getActiveResourcesInfo().filter((name) => name === 'Timeout').length

  it('readClientRequest: no timer outlives the read, whatever it ended in', async () => {
    for (const body of ['{"model":"m"}', 'nope', `{"x":"${'x'.repeat(100)}"}`]) {
      const before = timeouts()
      const request = new Request('http://x', { method: 'POST', body })
      await readClientRequest(request, { adapter: openaiChat, maxRequestBodyBytes: 50 })
      expect(timeouts(), body).toBe(before)
    }
  })

  it('readNodeRequest: no timer outlives the read, whatever it ended in', async () => {
    const counts: [number, number][] = []
    const server = createServer(async (req, res) => {
      const before = timeouts()
      const body = await readNodeRequest(req, res, { adapter: openaiChat, maxRequestBodyBytes: 50 })
      counts.push([before, timeouts()])
      if (body !== undefined) res.writeHead(200).end()
    })
    const url = await loopback.listen(server)
    for (const body of ['{"model":"m"}', 'nope', `{"x":"${'x'.repeat(100)}"}`])
      await (await fetch(url, { method: 'POST', body })).text()
    expect(counts).toHaveLength(3)
    for (const [before, after] of counts) expect(after).toBe(before)
  })
})

const badOptions: readonly [string, number][] = [
  ['requestBodyTimeoutMs', Number.NaN],
  ['requestBodyTimeoutMs', -1],
  ['requestBodyTimeoutMs', 0],
  ['requestBodyTimeoutMs', 2 ** 31],
  ['requestBodyTimeoutMs', Number.NEGATIVE_INFINITY],
  ['maxJsonDepth', 0],
  ['maxJsonDepth', 1.5],
  ['maxJsonDepth', Number.NaN],
  ['maxRequestBodyBytes', Number.NaN],
]

describe('option checks, before a byte is read', () => {
  it.each(badOptions)('readClientRequest %s: %d is a RangeError naming it', async (name, value) => {
    const { stream, state } = slowStream([utf8('{"model":"m"}')], 0)
    const request = new Request('http://x', {
      method: 'POST',
      body: stream,
      duplex: 'half',
    } as RequestInit)
    await expect(
      readClientRequest(request, { adapter: openaiChat, [name]: value }),
    ).rejects.toThrow(new RegExp(`^${name} must be`))
    expect(request.bodyUsed).toBe(false)
    expect(state.cancelled).toBe(false)
  })

  it.each(badOptions)('readNodeRequest %s: %d is a RangeError naming it', async (name, value) => {
    const untouched = new Proxy({} as IncomingMessage, {
      get: () => {
        throw new Error('the request was touched')
      },
    })
    await expect(
      readNodeRequest(untouched, {} as ServerResponse, { adapter: openaiChat, [name]: value }),
    ).rejects.toThrow(new RegExp(`^${name} must be`))
  })
})

describe('readClientRequest: the refusal record', () => {
  it('every refusal carries kind, status, reason and the error the client was told', async () => {
    const cases: [Uint8Array[], Extra, number, string][] = [
      [[utf8('not json')], {}, 400, 'invalid-json'],
      [[Uint8Array.of(0x7b, 0xff, 0x7d)], {}, 400, 'invalid-utf8'],
      [[utf8('[1]')], {}, 400, 'not-an-object'],
      [[utf8('{"stream":true}')], {}, 400, 'invalid-request'],
      [
        [utf8('{"model":"m","messages":"xxxxxxxxxxxxxxxxxxxxxxx"}')],
        { maxRequestBodyBytes: 10 },
        413,
        'too-large',
      ],
    ]
    for (const [chunks, extra, status, reason] of cases) {
      const answer = await viaWeb(openaiChat, chunks, extra)
      expect(answer.status, reason).toBe(status)
      const refusal = answer.refusal as ClientRequestRefusal & { kind: 'refused' }
      expect(refusal, reason).toMatchObject({ kind: 'refused', ok: false, status, reason })
      expect(answer.body, reason).toContain(JSON.stringify(refusal.error.message))
      expect(refusal.durationMs).toBeGreaterThanOrEqual(0)
    }
  })
})

describe('readNodeRequest: onRefused', () => {
  it('is called once, after the answer was written, for a 400, a 413 and a 408', async () => {
    const answer = await viaNode(openaiChat, [utf8('{"model":7}')])
    expect(answer.refusal).toMatchObject({
      kind: 'refused',
      status: 400,
      reason: 'invalid-request',
    })
    const big = await viaNode(openaiChat, [utf8(`{"model":"m","x":"${'x'.repeat(100)}"}`)], {
      maxRequestBodyBytes: 20,
    })
    expect(big.refusal).toMatchObject({ kind: 'refused', status: 413, reason: 'too-large' })
  })

  it("a client that leaves mid-body: kind 'client-gone', nothing written, no wait", async () => {
    let resolveSeen: (refusal: ClientRequestRefusal) => void = () => {}
    const seen = new Promise<ClientRequestRefusal>((resolve) => {
      resolveSeen = resolve
    })
    const server = createServer(async (req, res) => {
      await readNodeRequest(req, res, { adapter: openaiChat, onRefused: resolveSeen })
    })
    const url = await loopback.listen(server)
    const req = httpRequest(url, { method: 'POST', headers: { 'content-length': '100' } })
    req.on('error', () => {})
    req.write('{"model":')
    await new Promise((resume) => setTimeout(resume, 50))
    req.destroy()
    expect(await seen).toMatchObject({ kind: 'client-gone', ok: false, status: null })
  })

  it('a hook that throws changes nothing', async () => {
    const server = createServer(async (req, res) => {
      const body = await readNodeRequest(req, res, {
        adapter: openaiChat,
        onRefused: () => {
          throw new Error('the host hook failed')
        },
      })
      if (body !== undefined) res.writeHead(200).end()
    })
    const url = await loopback.listen(server)
    const response = await fetch(url, { method: 'POST', body: 'nope' })
    expect(response.status).toBe(400)
  })
})

describe('readNodeRequest: a body some other code read first (plain Node)', () => {
  const consume = async (req: IncomingMessage) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    return Buffer.concat(chunks)
  }

  it('with nothing handed over: a 500 that names the cause at once, never a wait', async () => {
    const answer = await viaNode(openaiChat, [utf8('{"model":"m"}')], {}, 5, async (req) => {
      await consume(req)
      return undefined
    })
    expect(answer.status).toBe(500)
    expect(answer.body).toMatch(/already read/)
    expect(answer.body).toMatch(/parsedBody/)
    expect(answer.refusal).toMatchObject({ kind: 'refused', status: 500, reason: 'already-read' })
  })

  it.each([
    ['a Buffer', (bytes: Buffer) => bytes],
    ['a string', (bytes: Buffer) => bytes.toString('utf8')],
    ['a parsed object', (bytes: Buffer) => JSON.parse(bytes.toString('utf8')) as unknown],
  ])('handed over as %s (parsedBody): read through the same checks', async (_what, as) => {
    const before = async (req: IncomingMessage) => ({ parsedBody: as(await consume(req)) })
    const ok = await viaNode(openaiChat, [utf8('{"model":"m","stream":true}')], {}, 5, before)
    expect(ok.status).toBe(200)
    expect(ok.read).toEqual({ model: 'm', stream: true })
    const bad = await viaNode(openaiChat, [utf8('{"model":"m","stream":"yes"}')], {}, 5, before)
    expect(bad.status).toBe(400)
    const deep = await viaNode(openaiChat, [utf8(deepBody)], {}, 5, before)
    expect(deep.status).toBe(400)
    expect(deep.refusal?.reason).toBe('too-deep')
    const big = await viaNode(
      openaiChat,
      [utf8(`{"model":"m","x":"${'x'.repeat(200)}"}`)],
      {
        maxRequestBodyBytes: 100,
      },
      5,
      before,
    )
    expect(big.status).toBe(413)
  })

  it('a req.body set by a parser in front is used when the stream was read', async () => {
    const answer = await viaNode(
      openaiChat,
      [utf8('{"model":"m","stream":false}')],
      {},
      5,
      async (req) => {
        ;(req as IncomingMessage & { body?: unknown }).body = JSON.parse(
          (await consume(req)).toString('utf8'),
        )
        return undefined
      },
    )
    expect(answer.status).toBe(200)
    expect(answer.read).toEqual({ model: 'm', stream: false })
  })

  it('keepClientBytes with a handed-over object: frozen, and bytes kept that say what it says', async () => {
    const answer = await viaNode(
      openaiChat,
      [utf8('{"model":"m","stream":true}')],
      { keepClientBytes: true },
      5,
      async (req) => ({
        parsedBody: JSON.parse((await consume(req)).toString('utf8')) as unknown,
      }),
    )
    expect(answer.status).toBe(200)
    expect(Object.isFrozen(answer.read)).toBe(true)
  })
})

describe('readClientRequest: a body some other code read first', () => {
  it('with nothing handed over: a 500 that names the cause, not a rejection', async () => {
    const request = new Request('http://gateway/v1', { method: 'POST', body: '{"model":"m"}' })
    await request.text()
    const read = await readClientRequest(request, { adapter: openaiChat })
    expect(read.ok).toBe(false)
    if (read.ok) return
    expect(read.response.status).toBe(500)
    expect(await read.response.text()).toMatch(/already read/)
    expect(read.refusal.reason).toBe('already-read')
  })

  it('handed over (parsedBody, as Hono c.req.json() gives it): read through the same checks', async () => {
    const request = new Request('http://gateway/v1', { method: 'POST', body: '{"model":"m"}' })
    const parsedBody = await request.json()
    const read = await readClientRequest(request, { adapter: openaiChat, parsedBody })
    expect(read).toMatchObject({ ok: true, body: { model: 'm' } })
    const deep = new Request('http://gateway/v1', { method: 'POST', body: deepBody })
    const refused = await readClientRequest(deep, {
      adapter: openaiChat,
      parsedBody: JSON.parse(await deep.text()) as unknown,
    })
    expect(refused.ok).toBe(false)
    if (!refused.ok) expect(refused.refusal.reason).toBe('too-deep')
  })
})
