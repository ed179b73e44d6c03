import { connect } from 'node:net'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import type { FrameVerdict } from '../../src/advanced.js'
import {
  anthropicMessages,
  classifyEof,
  createFrameReader,
  createStreamTracker,
  type EofClass,
  type FrameReader,
  geminiGenerateContent,
  isFrameTooLargeError,
  isUpstreamReadError,
  openaiChat,
  openaiResponses,
  type SseFrame,
  type StreamAdapter,
} from '../../src/index.js'
import type { Fault, FaultKind } from '../../src/testing/faults.js'
import {
  createFaultyUpstream,
  type FaultyUpstream,
  type FaultyUpstreamOptions,
} from '../../src/testing/faulty-upstream.js'

const text = 'Hello there world'
const reasoning = 'Pondering the question first.'
const base = 'http://upstream.test'

interface Protocol {
  readonly path: string
  readonly adapter: StreamAdapter
}

const protocols: readonly Protocol[] = [
  { path: '/v1/chat/completions', adapter: openaiChat },
  { path: '/v1/responses', adapter: openaiResponses },
  { path: '/v1/messages', adapter: anthropicMessages },
  { path: '/v1beta/models/x:streamGenerateContent?alt=sse', adapter: geminiGenerateContent },
]

const upstreams: FaultyUpstream[] = []

afterEach(async () => {
  await Promise.all(upstreams.splice(0).map((upstream) => upstream.close()))
})

function open(options: FaultyUpstreamOptions = {}): FaultyUpstream {
  const upstream = createFaultyUpstream({ text, reasoning, ...options })
  upstreams.push(upstream)
  return upstream
}

function post(scenario?: string, headers: Record<string, string> = {}): RequestInit {
  return {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(scenario === undefined ? {} : { 'x-fault-scenario': scenario }),
      ...headers,
    },
    body: JSON.stringify({ model: 'test-model', stream: true }),
  }
}

/** Plays one fault in process and returns the response. */
async function play(
  fault: Fault | FaultKind,
  path: string,
  options: FaultyUpstreamOptions = {},
): Promise<Response> {
  const upstream = open({ ...options, scenarios: { s: [fault] } })
  return upstream.fetch(`${base}${path}`, post('s'))
}

interface Read {
  readonly frames: SseFrame[]
  readonly verdicts: FrameVerdict[]
  readonly eof: EofClass
  readonly bytesRead: number
  /** Why reading stopped early, or `undefined` at a clean end. */
  readonly error: unknown
}

/** Reads frames until the end, a failure, or `signal` aborts. */
async function readFrames(
  reader: FrameReader,
  adapter: StreamAdapter,
  signal?: AbortSignal,
): Promise<Read> {
  const tracker = createStreamTracker(adapter)
  const frames: SseFrame[] = []
  const verdicts: FrameVerdict[] = []
  let error: unknown
  try {
    for (
      let frame = await reader.next(signal === undefined ? {} : { signal });
      frame !== null;
      frame = await reader.next(signal === undefined ? {} : { signal })
    ) {
      frames.push(frame)
      verdicts.push(tracker.observe(frame))
    }
  } catch (caught) {
    error = caught
  }
  return { frames, verdicts, eof: classifyEof(tracker.state), bytesRead: reader.bytesRead, error }
}

async function readBody(response: Response, adapter: StreamAdapter): Promise<Read> {
  if (response.body === null) throw new Error('no body')
  return readFrames(createFrameReader(response.body), adapter)
}

function textOf(verdicts: readonly FrameVerdict[]): string {
  return verdicts.map((verdict) => (verdict.kind === 'text' ? verdict.text : '')).join('')
}

function reasoningOf(verdicts: readonly FrameVerdict[]): string {
  return verdicts.map((verdict) => (verdict.kind === 'reasoning' ? verdict.text : '')).join('')
}

function outputs(verdicts: readonly FrameVerdict[]): FrameVerdict[] {
  return verdicts.filter(
    (verdict) =>
      verdict.kind === 'text' ||
      verdict.kind === 'tool' ||
      verdict.kind === 'reasoning' ||
      verdict.kind === 'refusal',
  )
}

function errorShape(adapter: StreamAdapter): Record<string, unknown> {
  switch (adapter.name) {
    case 'anthropic-messages':
      return {
        type: 'error',
        error: { type: expect.any(String), message: expect.any(String) },
      }
    case 'gemini':
      return {
        error: {
          code: expect.any(Number),
          message: expect.any(String),
          status: expect.any(String),
        },
      }
    default:
      return { error: { message: expect.any(String), type: expect.any(String) } }
  }
}

describe('createFaultyUpstream: streaming faults, in process', () => {
  describe.each(protocols)('$path', ({ path, adapter }) => {
    it.each([
      ['ok', 'ok'],
      ['slow-drip', { kind: 'slow-drip', delayMs: 5 }],
      ['no-final-blank-line', 'no-final-blank-line'],
    ] as const)('%s completes with the configured text', async (_, fault) => {
      const response = await play(fault, path)
      expect(response.status).toBe(200)
      expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/)
      const read = await readBody(response, adapter)
      expect(read.error).toBeUndefined()
      expect(read.eof.kind).toBe('completed')
      expect(textOf(read.verdicts)).toBe(text)
      const last = read.frames.at(-1)
      expect(last?.terminated).toBe(fault !== 'no-final-blank-line')
      expect(read.frames.slice(0, -1).every((frame) => frame.terminated)).toBe(true)
    })

    it('slow-drip spaces its frames by delayMs', async () => {
      const started = performance.now()
      const read = await readBody(await play({ kind: 'slow-drip', delayMs: 15 }, path), adapter)
      expect(read.eof.kind).toBe('completed')
      // At least one gap per text frame (three words), with slack for timer granularity.
      expect(performance.now() - started).toBeGreaterThanOrEqual(3 * 15 - 5)
    })

    it('empty sends no bytes and classifies as empty', async () => {
      const response = await play('empty', path)
      expect(response.status).toBe(200)
      const read = await readBody(response, adapter)
      expect(read.error).toBeUndefined()
      expect(read.bytesRead).toBe(0)
      expect(read.frames).toHaveLength(0)
      expect(read.eof.kind).toBe('empty')
    })

    it('partial-then-cut ends with a non-empty strict prefix of the answer', async () => {
      const read = await readBody(await play('partial-then-cut', path), adapter)
      expect(read.error).toBeUndefined()
      expect(read.eof.kind).toBe('partial')
      const shown = textOf(read.verdicts)
      expect(shown.length).toBeGreaterThan(0)
      expect(shown.length).toBeLessThan(text.length)
      expect(text.startsWith(shown)).toBe(true)
    })

    it('thinking-only shows the configured reasoning and no text', async () => {
      const read = await readBody(await play('thinking-only', path), adapter)
      expect(read.error).toBeUndefined()
      expect(read.eof.kind).toBe('thinking-only')
      expect(reasoningOf(read.verdicts)).toBe(reasoning)
      expect(textOf(read.verdicts)).toBe('')
    })

    it.each([
      ['error-frame', true],
      ['fatal-error-frame', false],
    ] as const)('%s yields an error verdict with retryable %s', async (fault, retryable) => {
      const read = await readBody(await play(fault, path), adapter)
      expect(read.error).toBeUndefined()
      const errors = read.verdicts.filter((verdict) => verdict.kind === 'error')
      expect(errors).toHaveLength(1)
      expect(errors[0]).toMatchObject({ kind: 'error', error: { retryable } })
      expect(outputs(read.verdicts)).toHaveLength(0)
      expect(read.eof).toMatchObject({ kind: 'error-only', error: { retryable } })
    })

    it.each(['role-only-then-stall', 'headers-then-hang'] as const)(
      '%s shows nothing, and cancelling releases it',
      async (fault) => {
        const upstream = open({ scenarios: { s: [fault] } })
        const response = await upstream.fetch(`${base}${path}`, post('s'))
        expect(response.status).toBe(200)
        if (response.body === null) throw new Error('no body')
        const reader = createFrameReader(response.body)
        const read = await readFrames(reader, adapter, AbortSignal.timeout(100))
        expect(read.error).toMatchObject({ name: 'TimeoutError' })
        expect(outputs(read.verdicts)).toHaveLength(0)
        expect(read.eof.kind).toBe('empty')
        if (fault === 'headers-then-hang') expect(read.bytesRead).toBe(0)
        await reader.cancel()
        expect(reader.done).toBe(true)
        const started = performance.now()
        await upstream.close()
        expect(performance.now() - started).toBeLessThan(500)
      },
    )

    it('keepalives-only sends keep-alives every keepAliveMs and no output', async () => {
      const upstream = open({ keepAliveMs: 20, scenarios: { s: ['keepalives-only'] } })
      const response = await upstream.fetch(`${base}${path}`, post('s'))
      if (response.body === null) throw new Error('no body')
      const reader = createFrameReader(response.body)
      const read = await readFrames(reader, adapter, AbortSignal.timeout(150))
      expect(read.error).toMatchObject({ name: 'TimeoutError' })
      const keepalives = read.verdicts.filter((verdict) => verdict.kind === 'keepalive')
      expect(keepalives.length).toBeGreaterThanOrEqual(3)
      expect(keepalives.length).toBe(read.verdicts.length)
      expect(read.eof.kind).toBe('empty')
      await reader.cancel()
    })

    it.each(['keepalives-only', 'role-only-then-stall'] as const)(
      '%s with forMs stalls that long, then ends cleanly with no output',
      async (kind) => {
        const upstream = open({
          keepAliveMs: 20,
          scenarios: { s: [{ kind, forMs: 120 }] },
        })
        const started = performance.now()
        const response = await upstream.fetch(`${base}${path}`, post('s'))
        if (response.body === null) throw new Error('no body')
        const read = await readFrames(
          createFrameReader(response.body),
          adapter,
          AbortSignal.timeout(5_000),
        )
        // Ended by the upstream (not the 5 s bound), after the stall, with nothing a client can show.
        expect(read.error).toBeUndefined()
        expect(performance.now() - started).toBeGreaterThanOrEqual(100)
        expect(outputs(read.verdicts)).toEqual([])
        expect(['empty', 'partial']).toContain(read.eof.kind)
      },
    )

    it('oversized-frame makes a default reader fail with FrameTooLargeError', async () => {
      const read = await readBody(await play('oversized-frame', path), adapter)
      expect(isFrameTooLargeError(read.error)).toBe(true)
      expect(textOf(read.verdicts)).toBe('')
    })

    it('invalid-utf8 completes, with U+FFFD in a text verdict and 0xFF on the wire', async () => {
      const read = await readBody(await play('invalid-utf8', path), adapter)
      expect(read.error).toBeUndefined()
      expect(read.eof.kind).toBe('completed')
      expect(read.frames.some((frame) => frame.raw.includes(0xff))).toBe(true)
      const texts = read.verdicts.flatMap((verdict) => (verdict.kind === 'text' ? [verdict] : []))
      expect(texts.filter((verdict) => verdict.text.includes('\uFFFD'))).toHaveLength(1)
    })

    it('reset-mid-frame fails the read with UpstreamReadError after some output', async () => {
      const read = await readBody(await play('reset-mid-frame', path), adapter)
      expect(isUpstreamReadError(read.error)).toBe(true)
      expect(textOf(read.verdicts).length).toBeGreaterThan(0)
      expect(text.startsWith(textOf(read.verdicts))).toBe(true)
      expect(read.eof.kind).toBe('partial')
    })
  })

  it('Responses sequence numbers increase in stream order from 0', async () => {
    const read = await readBody(await play('ok', '/v1/responses'), openaiResponses)
    const numbers = read.frames.map(
      (frame) => (JSON.parse(frame.data ?? '{}') as { sequence_number?: number }).sequence_number,
    )
    expect(numbers).toEqual(numbers.map((_, i) => i))
  })
})

describe('createFaultyUpstream: status faults', () => {
  describe.each(protocols)('$path', ({ path, adapter }) => {
    it('rate-limited answers 429 with retry-after: 1 and a protocol error body', async () => {
      const response = await play('rate-limited', path)
      expect(response.status).toBe(429)
      expect(response.headers.get('retry-after')).toBe('1')
      expect(response.headers.get('retry-after-ms')).toBeNull()
      expect(response.headers.get('content-type')).toMatch(/^application\/json/)
      expect(await response.json()).toMatchObject(errorShape(adapter))
    })

    it('rate-limited with retryAfterMs answers retry-after-ms instead', async () => {
      const response = await play({ kind: 'rate-limited', retryAfterMs: 250 }, path)
      expect(response.status).toBe(429)
      expect(response.headers.get('retry-after-ms')).toBe('250')
      expect(response.headers.get('retry-after')).toBeNull()
      expect(await response.json()).toMatchObject(errorShape(adapter))
    })

    it('overloaded answers 529 with a protocol error body', async () => {
      const response = await play('overloaded', path)
      expect(response.status).toBe(529)
      expect(await response.json()).toMatchObject(errorShape(adapter))
    })

    it('html-500 answers a 500 HTML page with a title', async () => {
      const response = await play('html-500', path)
      expect(response.status).toBe(500)
      expect(response.headers.get('content-type')).toMatch(/^text\/html/)
      expect(await response.text()).toMatch(/<title>[^<]+<\/title>/)
    })

    it('json-error-200 answers 200 application/json with an error object', async () => {
      const response = await play('json-error-200', path)
      expect(response.status).toBe(200)
      expect(response.headers.get('content-type')).toMatch(/^application\/json/)
      expect(await response.json()).toMatchObject(errorShape(adapter))
    })
  })

  it('overloaded on /v1/messages is an Anthropic overloaded_error', async () => {
    const response = await play('overloaded', '/v1/messages')
    expect(response.status).toBe(529)
    expect(await response.json()).toEqual({
      type: 'error',
      error: { type: 'overloaded_error', message: expect.any(String) },
    })
  })
})

describe('createFaultyUpstream: scenarios and recording', () => {
  const secrets = {
    authorization: 'Bearer sk-secret-authorization-1',
    'x-api-key': 'sk-secret-x-api-key-2',
    'x-goog-api-key': 'sk-secret-goog-3',
  }

  it('plays one fault per attempt, repeats the last, and records each request', async () => {
    const upstream = open({ scenarios: { flaky: ['rate-limited', 'empty', 'ok'] } })
    const statuses: number[] = []
    const bodies: string[] = []
    for (let i = 0; i < 4; i++) {
      const init = post('flaky', secrets)
      bodies.push(init.body as string)
      const response = await upstream.fetch(`${base}/v1/chat/completions`, init)
      statuses.push(response.status)
      await response.arrayBuffer()
    }
    expect(statuses).toEqual([429, 200, 200, 200])
    expect(upstream.requests.map((r) => [r.attempt, r.fault])).toEqual([
      [1, 'rate-limited'],
      [2, 'empty'],
      [3, 'ok'],
      [4, 'ok'],
    ])
    for (const [i, request] of upstream.requests.entries()) {
      expect(request).toMatchObject({
        scenario: 'flaky',
        protocol: 'openai-chat',
        method: 'POST',
        path: '/v1/chat/completions',
        body: bodies[i],
      })
      expect(request.headers).toMatchObject({
        authorization: '[redacted]',
        'x-api-key': '[redacted]',
        'x-goog-api-key': '[redacted]',
        'x-fault-scenario': 'flaky',
      })
    }
    const recorded = JSON.stringify(upstream.requests)
    for (const secret of Object.values(secrets)) expect(recorded).not.toContain(secret)
    expect(recorded).not.toContain('sk-secret')
  })

  it('the empty attempt of a scenario really is empty', async () => {
    const upstream = open({ scenarios: { flaky: ['rate-limited', 'empty', 'ok'] } })
    await (await upstream.fetch(`${base}/v1/messages`, post('flaky'))).arrayBuffer()
    const second = await upstream.fetch(`${base}/v1/messages`, post('flaky'))
    expect(await readBody(second, anthropicMessages)).toMatchObject({
      bytesRead: 0,
      eof: { kind: 'empty' },
    })
    const third = await upstream.fetch(`${base}/v1/messages`, post('flaky'))
    const read = await readBody(third, anthropicMessages)
    expect(read.eof.kind).toBe('completed')
    expect(textOf(read.verdicts)).toBe(text)
  })

  it("the deprecated fault name 'empty-eof' still plays an empty stream, recorded as 'empty'", async () => {
    const upstream = open({ scenarios: { old: ['empty-eof', 'ok'] } })
    const first = await upstream.fetch(`${base}/v1/chat/completions`, post('old'))
    expect(await readBody(first, openaiChat)).toMatchObject({
      bytesRead: 0,
      eof: { kind: 'empty' },
    })
    await (await upstream.fetch(`${base}/v1/chat/completions`, post('old'))).arrayBuffer()
    expect(upstream.requests.map((r) => r.fault)).toEqual(['empty', 'ok'])
  })

  it('records the protocol picked from each path', async () => {
    const upstream = open()
    for (const { path } of protocols) {
      await (await upstream.fetch(`${base}${path}`, post())).arrayBuffer()
    }
    expect(upstream.requests.map((r) => [r.protocol, r.path])).toEqual([
      ['openai-chat', '/v1/chat/completions'],
      ['openai-responses', '/v1/responses'],
      ['anthropic-messages', '/v1/messages'],
      ['gemini', '/v1beta/models/x:streamGenerateContent'],
    ])
  })

  it('a request without x-fault-scenario plays the default scenario, which is ok', async () => {
    const upstream = open({ scenarios: { flaky: ['rate-limited'] } })
    const response = await upstream.fetch(`${base}/v1/chat/completions`, post())
    expect(response.status).toBe(200)
    const read = await readBody(response, openaiChat)
    expect(read.eof.kind).toBe('completed')
    expect(textOf(read.verdicts)).toBe(text)
    expect(upstream.requests).toMatchObject([{ scenario: 'default', attempt: 1, fault: 'ok' }])
  })

  it('reset() starts every attempt count again', async () => {
    const upstream = open({ scenarios: { flaky: ['rate-limited', 'ok'] } })
    const statuses = async () => {
      const response = await upstream.fetch(`${base}/v1/chat/completions`, post('flaky'))
      await response.arrayBuffer()
      return response.status
    }
    expect([await statuses(), await statuses()]).toEqual([429, 200])
    upstream.reset()
    expect(await statuses()).toBe(429)
    expect(upstream.requests.at(-1)).toMatchObject({ attempt: 1, fault: 'rate-limited' })
  })

  it('records the attempt that chose the fault, even for concurrent requests', async () => {
    const upstream = open({ scenarios: { flaky: ['rate-limited', 'ok'] } })
    const responses = await Promise.all([
      upstream.fetch(`${base}/v1/chat/completions`, post('flaky')),
      upstream.fetch(`${base}/v1/chat/completions`, post('flaky')),
    ])
    await Promise.all(responses.map((response) => response.arrayBuffer()))
    expect(responses.map((response) => response.status)).toEqual([429, 200])
    expect(
      upstream.requests
        .map((r) => [r.attempt, r.fault])
        .sort((a, b) => Number(a[0]) - Number(b[0])),
    ).toEqual([
      [1, 'rate-limited'],
      [2, 'ok'],
    ])
  })
})

describe('createFaultyUpstream: fetch honours its signal in process', () => {
  it('rejects at once for an already-aborted signal', async () => {
    const upstream = open({ scenarios: { s: ['hang-before-headers'] } })
    const outcome = await Promise.race([
      upstream
        .fetch(`${base}/v1/chat/completions`, { ...post('s'), signal: AbortSignal.abort() })
        .then(
          () => 'resolved',
          (caught: unknown) => (caught as Error).name,
        ),
      new Promise((resolve) => setTimeout(() => resolve('still pending'), 100)),
    ])
    expect(outcome).toBe('AbortError')
  })

  it('rejects a pending hang-before-headers when the signal aborts', async () => {
    const upstream = open({ scenarios: { s: ['hang-before-headers'] } })
    const error = await upstream
      .fetch(`${base}/v1/chat/completions`, { ...post('s'), signal: AbortSignal.timeout(50) })
      .then(
        () => undefined,
        (caught: unknown) => caught,
      )
    expect(error).toMatchObject({ name: 'TimeoutError' })
  })

  it('rejects a hang-before-headers whose signal aborted while its body was read (no abort event comes then)', async () => {
    const upstream = open({ scenarios: { s: ['hang-before-headers'] } })
    const controller = new AbortController()
    const bytes = new TextEncoder().encode(JSON.stringify({ model: 'test-model', stream: true }))
    const body = new ReadableStream<Uint8Array>({
      pull(stream) {
        // The client gives up while the upstream is still reading what it sent.
        controller.abort()
        stream.enqueue(bytes)
        stream.close()
      },
    })
    const error = await upstream
      .fetch(`${base}/v1/chat/completions`, {
        ...post('s'),
        body,
        duplex: 'half',
        signal: controller.signal,
      } as RequestInit)
      .then(
        () => undefined,
        (caught: unknown) => caught,
      )
    expect(error).toMatchObject({ name: 'AbortError' })
  })

  it('aborting mid-stream errors the body, as fetch does, instead of ending it cleanly', async () => {
    const upstream = open({ scenarios: { s: [{ kind: 'slow-drip', delayMs: 30 }] } })
    const controller = new AbortController()
    const response = await upstream.fetch(`${base}/v1/chat/completions`, {
      ...post('s'),
      signal: controller.signal,
    })
    setTimeout(() => controller.abort(), 50)
    await expect(response.arrayBuffer()).rejects.toMatchObject({ name: 'AbortError' })
  })
})

describe('createFaultyUpstream: HTTP mode', () => {
  it('listen() serves the same ok stream on 127.0.0.1', async () => {
    const upstream = open()
    const url = await upstream.listen()
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    const overHttp = await fetch(`${url}/v1/chat/completions`, post())
    expect(overHttp.status).toBe(200)
    expect(overHttp.headers.get('content-type')).toMatch(/^text\/event-stream/)
    const httpBytes = new Uint8Array(await overHttp.arrayBuffer())
    const inProcess = await upstream.fetch(`${base}/v1/chat/completions`, post())
    expect(httpBytes).toEqual(new Uint8Array(await inProcess.arrayBuffer()))
    const read = await readFrames(
      createFrameReader(new Blob([httpBytes]).stream() as ReadableStream<Uint8Array>),
      openaiChat,
    )
    expect(read.eof.kind).toBe('completed')
    expect(textOf(read.verdicts)).toBe(text)
  })

  it('reset-mid-frame cuts the connection: the client read rejects', async () => {
    const upstream = open({ scenarios: { s: ['reset-mid-frame'] } })
    const url = await upstream.listen()
    const response = await fetch(`${url}/v1/chat/completions`, post('s'))
    expect(response.status).toBe(200)
    await expect(response.arrayBuffer()).rejects.toThrow()

    const again = await fetch(`${url}/v1/chat/completions`, post('s'))
    const read = await readBody(again, openaiChat)
    expect(isUpstreamReadError(read.error)).toBe(true)
    expect(read.eof.kind).not.toBe('completed')
  })

  it('reset-mid-frame over HTTP delivers the output written before the cut', async () => {
    const upstream = open({ scenarios: { s: ['reset-mid-frame'] } })
    const url = await upstream.listen()
    const response = await fetch(`${url}/v1/chat/completions`, post('s'))
    const read = await readBody(response, openaiChat)
    expect(isUpstreamReadError(read.error)).toBe(true)
    // In process the same fault shows output first; over HTTP it must too.
    expect(textOf(read.verdicts).length).toBeGreaterThan(0)
    expect(read.eof.kind).toBe('partial')
  })

  it('a client that disconnects mid-upload causes no unhandled rejection', async () => {
    const upstream = open()
    const url = new URL(await upstream.listen())
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown) => unhandled.push(reason)
    process.on('unhandledRejection', onUnhandled)
    try {
      const socket = connect(Number(url.port), '127.0.0.1')
      await new Promise<void>((resolve) => socket.once('connect', resolve))
      socket.write(
        'POST /v1/chat/completions HTTP/1.1\r\nhost: upstream.test\r\ncontent-length: 100\r\n\r\n{"a":',
      )
      await new Promise((resolve) => setTimeout(resolve, 30))
      socket.destroy()
      await new Promise((resolve) => setTimeout(resolve, 100))
    } finally {
      process.off('unhandledRejection', onUnhandled)
    }
    expect(unhandled).toEqual([])
    expect(upstream.requests).toHaveLength(0)
  })

  it('hang-before-headers: the client times out and close() resolves promptly', async () => {
    const upstream = open({ scenarios: { s: ['hang-before-headers'] } })
    const url = await upstream.listen()
    const error = await fetch(`${url}/v1/chat/completions`, {
      ...post('s'),
      signal: AbortSignal.timeout(150),
    }).then(
      () => undefined,
      (caught: unknown) => caught,
    )
    expect(error).toMatchObject({ name: expect.stringMatching(/^(TimeoutError|AbortError)$/) })
    const started = performance.now()
    await upstream.close()
    expect(performance.now() - started).toBeLessThan(1000)
  })

  it('close() ends a stream still hanging over HTTP', async () => {
    const upstream = open({ scenarios: { s: ['headers-then-hang'] } })
    const url = await upstream.listen()
    const response = await fetch(`${url}/v1/chat/completions`, post('s'))
    expect(response.status).toBe(200)
    const body = response.arrayBuffer().then(
      (bytes) => bytes.byteLength,
      () => -1,
    )
    const started = performance.now()
    await upstream.close()
    expect(performance.now() - started).toBeLessThan(1000)
    expect(await body).toBeLessThanOrEqual(0)
  })
})

describe('createFaultyUpstream: official SDKs', () => {
  it('openai streams the configured text over HTTP', async () => {
    const upstream = open()
    const url = await upstream.listen()
    const client = new OpenAI({ apiKey: 'sk-test', baseURL: `${url}/v1`, maxRetries: 0 })
    const stream = await client.chat.completions.create({
      model: 'gpt-test',
      messages: [{ role: 'user', content: 'Hi' }],
      stream: true,
    })
    let got = ''
    let finish: string | null = null
    for await (const chunk of stream) {
      got += chunk.choices[0]?.delta.content ?? ''
      finish = chunk.choices[0]?.finish_reason ?? finish
    }
    expect(got).toBe(text)
    expect(finish).toBe('stop')
    expect(upstream.requests[0]?.headers.authorization).toBe('[redacted]')
  })

  it('anthropic finalMessage() has the configured text and end_turn', async () => {
    const upstream = open()
    const url = await upstream.listen()
    const client = new Anthropic({ apiKey: 'sk-ant-test', baseURL: url, maxRetries: 0 })
    const message = await client.messages
      .stream({
        model: 'claude-test',
        max_tokens: 64,
        messages: [{ role: 'user', content: 'Hi' }],
      })
      .finalMessage()
    expect(message.content).toHaveLength(1)
    expect(message.content[0]).toMatchObject({ type: 'text', text })
    expect(message.stop_reason).toBe('end_turn')
    expect(upstream.requests[0]?.protocol).toBe('anthropic-messages')
    expect(JSON.stringify(upstream.requests)).not.toContain('sk-ant-test')
  })

  it('openai responses.stream() finalResponse() has the configured text', async () => {
    const upstream = open()
    const url = await upstream.listen()
    const client = new OpenAI({ apiKey: 'sk-test', baseURL: `${url}/v1`, maxRetries: 0 })
    const response = await client.responses
      .stream({ model: 'gpt-test', input: 'Hi' })
      .finalResponse()
    expect(response.output_text).toBe(text)
  })
})

describe('scenario checks', () => {
  it.each([
    [
      { s: ['keepalive-only'] },
      /scenarios\.s\[0\]: unknown fault "keepalive-only"; did you mean "keepalives-only"\?/,
    ],
    [
      { s: ['ok', { kind: 'slow-drip', delayMS: 5 }] },
      /scenarios\.s\[1\]: unknown option "delayMS"; did you mean "delayMs"\?/,
    ],
    [{ s: 'ok' }, /scenarios\.s must be a list of faults/],
  ])('%j is refused with a TypeError naming it', (scenarios, message) => {
    expect(() => createFaultyUpstream({ scenarios } as never)).toThrow(TypeError)
    expect(() => createFaultyUpstream({ scenarios } as never)).toThrow(message)
  })
})

describe('createFaultyUpstream: continuing a prefilled answer', () => {
  const upstream = createFaultyUpstream({ text })
  const chat = (body: Record<string, unknown>) =>
    new OpenAI({
      apiKey: 'sk-x',
      baseURL: `${base}/v1`,
      fetch: upstream.fetch,
      maxRetries: 0,
    }).chat.completions
      .stream({ model: 'm', ...body } as never)
      .finalChatCompletion()
  const user = { role: 'user', content: 'hi' }

  it('Anthropic: a final assistant message (trimmed) is continued with the rest, its space included', async () => {
    const client = new Anthropic({
      apiKey: 'sk-x',
      baseURL: base,
      fetch: upstream.fetch,
      maxRetries: 0,
    })
    const message = await client.messages
      .stream({
        model: 'c',
        max_tokens: 64,
        messages: [user as never, { role: 'assistant', content: 'Hello there' }],
      })
      .finalMessage()
    expect(message.content).toEqual([{ type: 'text', text: ' world' }])
  })

  it('Chat: prefix: true (DeepSeek, Mistral) and continue_final_message (vLLM) are continued', async () => {
    const prefixed = await chat({
      messages: [user, { role: 'assistant', content: 'Hello ', prefix: true }],
    })
    expect(prefixed.choices[0]?.message.content).toBe('there world')
    const continued = await chat({
      messages: [user, { role: 'assistant', content: 'Hello the' }],
      continue_final_message: true,
      add_generation_prompt: false,
    })
    expect(continued.choices[0]?.message.content).toBe('re world')
  })

  it('Chat: a final assistant message without a dialect flag is a past turn: the whole answer', async () => {
    const plain = await chat({ messages: [user, { role: 'assistant', content: 'Hello ' }] })
    expect(plain.choices[0]?.message.content).toBe(text)
  })

  it('a prefill that begins no scripted answer gets the whole answer', async () => {
    const other = await chat({
      messages: [user, { role: 'assistant', content: 'Bonjour', prefix: true }],
    })
    expect(other.choices[0]?.message.content).toBe(text)
  })
})
