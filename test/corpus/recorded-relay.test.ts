/**
 * The recorded corpus through the library's two front doors, over real HTTP on 127.0.0.1:
 * every complete recording, served by an upstream, arrives byte for byte through `relay()`
 * (a gateway with `nodeSink`) and through `createResilientFetch`; the official SDKs (`openai`
 * for Chat and Responses, `@anthropic-ai/sdk`, `@google/genai`) read the same events through
 * both as straight from the upstream; and the relay's outcome is a complete answer with the
 * usage the recording reported (by the usage rule, as recorded.test.ts checks the tracker).
 */
import { createServer } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import { GoogleGenAI } from '@google/genai'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, type ExpectStatic, it } from 'vitest'
import { createResilientFetch, type RelayOutcome, relay, type TokenUsage } from '../../src/index.js'
import { nodeSink } from '../../src/node.js'
import { withBody } from '../support/loopback.js'
import { complete, type Recording } from './corpus.js'
import type { Usage } from './oracle.js'

const byFile = new Map(complete.map((r) => [r.file, r]))
const relayed = new Map<string, RelayOutcome>()
const servers: ReturnType<typeof createServer>[] = []
let upstreamUrl = ''
let gatewayUrl = ''

async function listen(server: ReturnType<typeof createServer>): Promise<string> {
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return `http://127.0.0.1:${address.port}`
}

const fileOf = (headers: Record<string, string | string[] | undefined>) =>
  String(headers['x-corpus-file'])

beforeAll(async () => {
  // The upstream: the recording named by the request's header, as one 200 event stream.
  upstreamUrl = await listen(
    createServer((req, res) =>
      withBody(req, () => {
        const recording = byFile.get(fileOf(req.headers))
        if (recording === undefined) {
          res.writeHead(404).end()
          return
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.end(recording.bytes)
      }),
    ),
  )
  // The gateway: relay() in front of the upstream, one attempt, no pool.
  gatewayUrl = await listen(
    createServer((req, res) =>
      withBody(req, () => {
        const file = fileOf(req.headers)
        const recording = byFile.get(file) as Recording
        void relay({
          sink: nodeSink(res),
          adapter: recording.adapter,
          stream: true,
          hooks: { onOutcome: (outcome) => relayed.set(file, outcome) },
          attempt: ({ signal }) =>
            fetch(`${upstreamUrl}/v1`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'x-corpus-file': file },
              body: '{"stream":true}',
              signal,
            }),
        })
      }),
    ),
  )
})

afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
})

/** The request path each protocol's SDK posts to (the servers here answer any path). */
const paths: Record<Recording['protocol'], string> = {
  'openai-chat': '/v1/chat/completions',
  'openai-responses': '/v1/responses',
  'anthropic-messages': '/v1/messages',
  gemini: '/v1beta/models/m:streamGenerateContent?alt=sse',
}

function post(recording: Recording, base: string, using: typeof fetch = fetch) {
  return using(`${base}${paths[recording.protocol]}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-corpus-file': recording.file },
    body: JSON.stringify({ model: 'm', stream: true }),
  })
}

function resilientFor(recording: Recording, outcomes?: RelayOutcome[]) {
  return createResilientFetch({
    adapter: recording.adapter,
    ...(outcomes === undefined ? {} : { onOutcome: (outcome) => outcomes.push(outcome) }),
  }) as typeof fetch
}

/** Where two byte arrays first differ, with a little text around it, or `null`. */
function firstDifference(got: Uint8Array, want: Uint8Array): string | null {
  const length = Math.min(got.length, want.length)
  let at = 0
  while (at < length && got[at] === want[at]) at++
  if (at === length && got.length === want.length) return null
  const around = (bytes: Uint8Array) =>
    JSON.stringify(new TextDecoder().decode(bytes.subarray(Math.max(0, at - 40), at + 80)))
  return `${got.length} bytes, expected ${want.length}; first difference at byte ${at}: got ${around(got)}, expected ${around(want)}`
}

interface Read {
  readonly events: string[]
  readonly error: string | undefined
}

/** What the protocol's official SDK reads from a server at `base` (through `using`). */
async function sdkRead(recording: Recording, base: string, using?: typeof fetch): Promise<Read> {
  const events: string[] = []
  const defaultHeaders = { 'x-corpus-file': recording.file }
  const common = { apiKey: 'x', maxRetries: 0, defaultHeaders, ...(using ? { fetch: using } : {}) }
  try {
    if (recording.protocol === 'openai-chat' || recording.protocol === 'openai-responses') {
      const client = new OpenAI({ baseURL: `${base}/v1`, ...common })
      const stream =
        recording.protocol === 'openai-chat'
          ? await client.chat.completions.create({
              model: 'm',
              messages: [{ role: 'user', content: 'hi' }],
              stream: true,
            })
          : await client.responses.create({ model: 'm', input: 'hi', stream: true })
      for await (const event of stream) events.push(JSON.stringify(event))
    } else if (recording.protocol === 'anthropic-messages') {
      const client = new Anthropic({ baseURL: base, ...common })
      const stream = await client.messages.create({
        model: 'm',
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      })
      for await (const event of stream) events.push(JSON.stringify(event))
    } else if (using === undefined) {
      const client = new GoogleGenAI({
        apiKey: 'x',
        httpOptions: { baseUrl: base, headers: defaultHeaders, retryOptions: { attempts: 1 } },
      })
      const stream = await client.models.generateContentStream({ model: 'm', contents: 'hi' })
      // The SDK adds the HTTP response (headers, date) to each chunk: not an event.
      for await (const chunk of stream) {
        events.push(
          JSON.stringify(chunk, (key, value) => (key === 'sdkHttpResponse' ? undefined : value)),
        )
      }
    } else {
      // @google/genai takes no fetch of its own: read the events the way it does, data lines.
      const body = await (await post(recording, base, using)).text()
      for (const block of body.split('\n\n')) {
        const data = block
          .split('\n')
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(5).trim())
        if (data.length > 0) events.push(JSON.stringify(JSON.parse(data.join('\n'))))
      }
    }
  } catch (error) {
    return { events, error: error instanceof Error ? `${error.name}: ${error.message}` : 'thrown' }
  }
  return { events, error: undefined }
}

/** The usage fields the usage rule defines. */
function ruled(usage: Usage | TokenUsage | null | undefined) {
  if (usage === null || usage === undefined) return null
  const { inputTokens, outputTokens, reasoningTokens } = usage
  const out = Object.entries({ inputTokens, outputTokens, reasoningTokens }).filter(
    ([, value]) => value !== undefined,
  )
  return out.length === 0 ? null : Object.fromEntries(out)
}

/**
 * One request each way. The checks of a file are soft: a failure names its file and its
 * check, and the others still run.
 */
describe.concurrent.each(complete.map((r) => [r.file, r] as const))('%s', (file, recording) => {
  it('arrives byte for byte through relay() and createResilientFetch, with a complete outcome and the usage it reported; the official SDK reads the same events through both as directly', async ({
    expect,
  }) => {
    const want = ruled(recording.usage)
    const direct = new Uint8Array(await (await post(recording, upstreamUrl)).arrayBuffer())
    expect(firstDifference(direct, recording.bytes), `${file}: straight from the upstream`).toBe(
      null,
    )

    const viaRelay = new Uint8Array(await (await post(recording, gatewayUrl)).arrayBuffer())
    expect.soft(firstDifference(viaRelay, recording.bytes), `${file}: through relay()`).toBe(null)
    await expect.poll(() => relayed.get(file)).toBeDefined()
    checkOutcome(expect, `${file}: relay()`, relayed.get(file) as RelayOutcome, want)

    const outcomes: RelayOutcome[] = []
    const response = await post(recording, upstreamUrl, resilientFor(recording, outcomes))
    const viaFetch = new Uint8Array(await response.arrayBuffer())
    expect
      .soft(firstDifference(viaFetch, recording.bytes), `${file}: through createResilientFetch`)
      .toBe(null)
    await expect.poll(() => outcomes[0]).toBeDefined()
    checkOutcome(expect, `${file}: createResilientFetch`, outcomes[0] as RelayOutcome, want)

    const read = await sdkRead(recording, upstreamUrl)
    expect(read.events.length, `${file}: events the SDK read directly`).toBeGreaterThan(0)
    expect
      .soft(await sdkRead(recording, gatewayUrl), `${file}: the SDK through relay()`)
      .toEqual(read)
    // @google/genai takes no fetch: Gemini's events are read as it reads them, both ways.
    const straight =
      recording.protocol === 'gemini' ? await sdkRead(recording, upstreamUrl, fetch) : read
    expect
      .soft(
        await sdkRead(recording, upstreamUrl, resilientFor(recording)),
        `${file}: the SDK through createResilientFetch`,
      )
      .toEqual(straight)
  })
})

function checkOutcome(
  expect: ExpectStatic,
  where: string,
  outcome: RelayOutcome,
  want: ReturnType<typeof ruled>,
): void {
  const ok = outcome.kind === 'committed' && outcome.ok
  expect
    .soft(
      { kind: outcome.kind, ok },
      `${where}: outcome ${outcome.kind === 'failed' ? outcome.reason : ''}`,
    )
    .toEqual({ kind: 'committed', ok: true })
  const got = ruled(outcome.kind === 'committed' ? outcome.usage : undefined)
  expect
    .soft(got, `${where}: outcome usage ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`)
    .toEqual(want)
}
