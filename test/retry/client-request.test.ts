/**
 * Reading a client's request is the library's job: `readClientRequest` (web `Request`) and its
 * twin `readNodeRequest` (`stream-boundary/node`, a real node:http server) decode UTF-8 once,
 * bound the size, parse JSON and check what the relay relies on. An invalid request gets a
 * 400 (or 413) in the client's own protocol and never reaches the upstream.
 */

import { createServer, request as httpRequest } from 'node:http'
import {
  anthropicMessages,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  readClientRequest,
  type StreamAdapter,
} from 'stream-boundary'
import { readNodeRequest } from 'stream-boundary/node'
import { describe, expect, it } from 'vitest'
import { useLoopback } from '../support/loopback.js'

const loopback = useLoopback()

interface Answer {
  readonly status: number
  readonly body: string
  /** The parsed body the reader handed on, when the request was valid. */
  readonly read: Record<string, unknown> | undefined
}

/** A web reader: what the host would return, and what it would relay. */
async function viaWeb(
  adapter: StreamAdapter,
  chunks: readonly Uint8Array[],
  limit?: number,
): Promise<Answer> {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk)
      controller.close()
    },
  })
  const request = new Request('http://gateway/v1', {
    method: 'POST',
    body,
    duplex: 'half',
  } as RequestInit)
  const read = await readClientRequest(request, {
    adapter,
    ...(limit === undefined ? {} : { maxRequestBodyBytes: limit }),
  })
  if (read.ok) return { status: 200, body: '', read: read.body }
  return { status: read.response.status, body: await read.response.text(), read: undefined }
}

/** The Node twin over a real server: the chunks are written one by one, with pauses. */
async function viaNode(
  adapter: StreamAdapter,
  chunks: readonly Uint8Array[],
  limit?: number,
): Promise<Answer> {
  let read: Record<string, unknown> | undefined
  const server = createServer(async (req, res) => {
    read = await readNodeRequest(req, res, {
      adapter,
      ...(limit === undefined ? {} : { maxRequestBodyBytes: limit }),
    })
    if (read !== undefined) res.writeHead(200).end()
  })
  const url = await loopback.listen(server)
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}/v1`, { method: 'POST' }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        body += chunk
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, read }))
    })
    req.on('error', reject)
    const write = async () => {
      for (const chunk of chunks) {
        req.write(chunk)
        await new Promise((resume) => setTimeout(resume, 5))
      }
      req.end()
    }
    void write()
  })
}

const protocols: readonly [StreamAdapter, (body: string) => string][] = [
  [openaiChat, (body) => (JSON.parse(body) as { error: { message: string } }).error.message],
  [openaiResponses, (body) => (JSON.parse(body) as { error: { message: string } }).error.message],
  [
    anthropicMessages,
    (body) => {
      const json = JSON.parse(body) as { type: string; error: { type: string; message: string } }
      expect(json.type).toBe('error')
      return json.error.message
    },
  ],
  [
    geminiGenerateContent,
    (body) => {
      const json = JSON.parse(body) as { error: { code: number; message: string } }
      expect(json.error.code).toBe(400)
      return json.error.message
    },
  ],
]

const utf8 = (text: string) => new TextEncoder().encode(text)

const invalid: readonly [string, readonly Uint8Array[], RegExp][] = [
  ['not JSON', [utf8('not json')], /not valid JSON/],
  ['empty', [], /not valid JSON/],
  ['an array', [utf8('[1,2]')], /must be a JSON object, got an array/],
  ['null', [utf8('null')], /must be a JSON object, got null/],
  [
    '"stream": "yes"',
    [utf8('{"model":"m","stream":"yes"}')],
    /`stream` must be a boolean, got string/,
  ],
  ['invalid UTF-8', [new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d])], /not valid UTF-8/],
]

describe.each([
  ['readClientRequest (web Request)', viaWeb],
  ['readNodeRequest (node:http)', viaNode],
] as const)('%s', (_name, via) => {
  for (const [adapter, messageOf] of protocols) {
    it(`${adapter.name}: invalid bodies get a 400 in the protocol's own shape and are not handed on`, async () => {
      for (const [what, chunks, message] of invalid) {
        const answer = await via(adapter, chunks)
        expect(answer.status, what).toBe(400)
        expect(answer.read, what).toBeUndefined()
        expect(messageOf(answer.body), what).toMatch(message)
      }
    })
  }

  it('a body whose protocol names its model must have a string `model`', async () => {
    for (const adapter of [openaiChat, openaiResponses, anthropicMessages]) {
      const object = await via(adapter, [utf8('{"model":{"id":"x"},"stream":true}')])
      expect(object.status, adapter.name).toBe(400)
      expect(object.body).toMatch(/`model` must be a non-empty string, got object/)
      const missing = await via(adapter, [utf8('{"stream":true}')])
      expect(missing.status, adapter.name).toBe(400)
      expect(missing.body).toMatch(/no `model`/)
    }
    // Gemini names its model in the URL.
    const gemini = await via(geminiGenerateContent, [utf8('{"contents":[]}')])
    expect(gemini.status).toBe(200)
  })

  it('a multi-byte character split across chunks arrives whole', async () => {
    const text = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: 'héllo ✓ 🦊 日本' }],
    })
    const bytes = utf8(text)
    // Split inside the fox (4 bytes) and inside the check mark (3 bytes).
    const fox = bytes.indexOf(0xf0)
    const check = bytes.indexOf(0xe2)
    const chunks = [
      bytes.slice(0, check + 1),
      bytes.slice(check + 1, fox + 2),
      bytes.slice(fox + 2),
    ]
    const answer = await via(openaiChat, chunks)
    expect(answer.status).toBe(200)
    expect(answer.read).toEqual(JSON.parse(text))
  })

  it('a body past the bound gets a 413 in the protocol, naming the bound only', async () => {
    const big = utf8(JSON.stringify({ model: 'm', messages: 'x'.repeat(4_000) }))
    const answer = await via(anthropicMessages, [big.slice(0, 2_000), big.slice(2_000)], 1_000)
    expect(answer.status).toBe(413)
    expect(answer.read).toBeUndefined()
    const json = JSON.parse(answer.body) as { error: { message: string } }
    expect(json.error.message).toContain('1000 bytes')
    expect(answer.body).not.toContain('xxxx')
  })

  it('a valid request is handed on as parsed, with nothing answered', async () => {
    const answer = await via(openaiChat, [utf8('{"model":"m","stream":false}')])
    expect(answer.status).toBe(200)
    expect(answer.read).toEqual({ model: 'm', stream: false })
  })
})

describe('readers refuse a wrong adapter at once', () => {
  it('names the option', async () => {
    await expect(
      readClientRequest(new Request('http://x', { method: 'POST', body: '{}' }), {
        adapter: {} as StreamAdapter,
      }),
    ).rejects.toThrow(/readClientRequest: adapter must be a StreamAdapter/)
  })

  it('an adapter check that throws answers 400 naming the adapter, not a crash', async () => {
    const hostile: StreamAdapter = {
      ...openaiChat,
      name: 'hostile',
      invalidRequest: () => {
        throw new Error('boom')
      },
    }
    const answer = await viaWeb(hostile, [utf8('{"model":"m"}')])
    expect(answer.status).toBe(400)
    expect(answer.body).toMatch(/hostile adapter could not check the request/)
  })
})
