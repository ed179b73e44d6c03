import { afterEach, describe, expect, it, vi } from 'vitest'
import { peekDefaults } from '../../src/advanced.js'
import {
  anthropicMessages,
  createFrameReader,
  isPeekOverflowError,
  openaiChat,
  peekFirstOutput,
  StreamTimeoutError,
} from '../../src/index.js'
import { scriptedBody } from '../../src/testing/scripted-body.js'
import { useFakeClock } from '../support/timers.js'

const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
const usage =
  'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}\n\n'
const text = (t: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}},"finish_reason":null}]}\n\n`
const reasoning =
  'data: {"choices":[{"index":0,"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}\n\n'
const stop = 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'

afterEach(() => {
  vi.useRealTimers()
})

async function peekWithClock(
  steps: Parameters<typeof scriptedBody>[0],
  options: Parameters<typeof peekFirstOutput>[2],
  advanceMs: number,
) {
  useFakeClock()
  const body = scriptedBody(steps)
  const reader = createFrameReader(body.stream)
  const pending = peekFirstOutput(reader, openaiChat, options)
  await vi.advanceTimersByTimeAsync(advanceMs)
  const outcome = await pending
  expect(vi.getTimerCount()).toBe(0)
  return { outcome, body, reader }
}

describe('peekFirstOutput with firstOutputTimeoutMs', () => {
  it.each([
    ['headers then stall', [{ hang: true } as const]],
    ['role-only then stall', [{ bytes: role }, { hang: true } as const]],
    ['usage-only then stall', [{ bytes: usage }, { hang: true } as const]],
    [
      'keep-alives only',
      Array.from({ length: 50 }, () => [{ bytes: ': keep-alive\n\n' }, { wait: 100 }]).flat() as {
        bytes: string
      }[],
    ],
  ])(
    '%s ends as first-output-timeout; keep-alives and preambles never reset it',
    async (_name, steps) => {
      const { outcome, reader } = await peekWithClock(steps, { firstOutputTimeoutMs: 1000 }, 1000)
      expect(outcome.kind).toBe('first-output-timeout')
      if (outcome.kind !== 'first-output-timeout') return
      expect(outcome.error).toBeInstanceOf(StreamTimeoutError)
      expect(outcome.error.code).toBe('FIRST_OUTPUT_TIMEOUT')
      expect(outcome.elapsedMs).toBeGreaterThanOrEqual(1000)
      expect(outcome.elapsedMs).toBeLessThan(1100)
      await reader.cancel()
    },
  )

  it('commits on visible output that arrives before the timeout', async () => {
    const { outcome } = await peekWithClock(
      [
        { bytes: role },
        { wait: 500 },
        { bytes: ': ping\n\n' },
        { wait: 400 },
        { bytes: text('Hi') },
        { hang: true },
      ],
      { firstOutputTimeoutMs: 1000 },
      950,
    )
    expect(outcome.kind).toBe('output')
    if (outcome.kind !== 'output') return
    expect(outcome.frames).toHaveLength(3)
    expect(outcome.verdict).toEqual({ kind: 'text', text: 'Hi' })
    expect(outcome.trigger).toBe('output')
    await outcome.reader.cancel()
  })

  it('leaves a frame cut by the timeout in the reader, and the same reader continues it', async () => {
    useFakeClock()
    let release!: () => void
    const gate = new Promise<void>((resolve) => {
      release = resolve
    })
    async function* upstream() {
      yield new TextEncoder().encode(role)
      yield new TextEncoder().encode(text('Hello').slice(0, 20))
      await gate
      yield new TextEncoder().encode(text('Hello').slice(20))
    }
    const reader = createFrameReader(upstream())
    const pending = peekFirstOutput(reader, openaiChat, { firstOutputTimeoutMs: 200 })
    await vi.advanceTimersByTimeAsync(200)
    const outcome = await pending
    expect(outcome.kind).toBe('first-output-timeout')
    if (outcome.kind !== 'first-output-timeout') return
    expect(outcome.partialFrameBytes).toBe(20)
    vi.useRealTimers()
    release()
    const next = await reader.next()
    expect(next?.data).toContain('"Hello"')
  })
})

describe('peekFirstOutput with firstByteTimeoutMs', () => {
  it('fires when the body sends no byte at all', async () => {
    const { outcome } = await peekWithClock(
      [{ hang: true }],
      { firstByteTimeoutMs: 300, firstOutputTimeoutMs: 5000 },
      300,
    )
    expect(outcome.kind).toBe('first-byte-timeout')
    if (outcome.kind === 'first-byte-timeout') expect(outcome.error.code).toBe('FIRST_BYTE_TIMEOUT')
  })

  it('does not fire once a byte arrived, even in a half frame', async () => {
    const { outcome } = await peekWithClock(
      [{ bytes: 'data: {"choi' }, { hang: true }],
      { firstByteTimeoutMs: 300, firstOutputTimeoutMs: 1000 },
      1000,
    )
    expect(outcome.kind).toBe('first-output-timeout')
    if (outcome.kind === 'first-output-timeout') expect(outcome.partialFrameBytes).toBe(12)
  })
})

describe('peekFirstOutput outcomes', () => {
  const peekText = async (
    body: string,
    options: Parameters<typeof peekFirstOutput>[2] = {},
    adapter = openaiChat,
  ) =>
    peekFirstOutput(
      createFrameReader(new Response(body).body as ReadableStream<Uint8Array>),
      adapter,
      options,
    )

  it('reports an error frame before output with its retryability', async () => {
    const retryable = await peekText(
      `${role}data: {"error":{"message":"Overloaded","type":"server_error"}}\n\n`,
    )
    expect(retryable).toMatchObject({
      kind: 'error-frame',
      error: { type: 'server_error', retryable: true },
    })
    const fatal = await peekText(
      'data: {"error":{"message":"bad","type":"invalid_request_error"}}\n\n',
    )
    expect(fatal).toMatchObject({ kind: 'error-frame', error: { retryable: false } })
  })

  it('reports EOF without output as empty, with all frames consumed', async () => {
    const outcome = await peekText(`${role}: ping\n\n${usage}`)
    expect(outcome.kind).toBe('empty')
    expect(outcome.frames).toHaveLength(3)
    if (outcome.kind === 'empty') expect(outcome.eof).toEqual({ kind: 'empty' })
  })

  it("commits on reasoning by default, holds it under commitOn: 'content'", async () => {
    expect((await peekText(`${reasoning}${text('x')}`)).kind).toBe('output')
    const content = await peekText(`${reasoning}${text('x')}`, { commitOn: 'content' })
    expect(content.kind === 'output' && content.frames.length).toBe(2)
    const thinkingOnly = await peekText(reasoning, { commitOn: 'content' })
    expect(thinkingOnly.kind).toBe('thinking-only')
  })

  it("commits on the first non-keep-alive frame under commitOn: 'first-frame'", async () => {
    const outcome = await peekText(`: ping\n\n${role}`, { commitOn: 'first-frame' })
    expect(outcome.kind === 'output' && outcome.frames.length).toBe(2)
  })

  it('ends on a terminal frame with no output: the upstream answered', async () => {
    const outcome = await peekText(`${role}${stop}data: [DONE]\n\n`)
    expect(outcome).toMatchObject({ kind: 'output', trigger: 'terminal' })
  })

  it('commits at maxPeekFrames or maxPeekBytes when frames other than keep-alives came (trigger bound), never peek-overflow', async () => {
    const frames = await peekText(role.repeat(10), { maxPeekFrames: 3 })
    expect(frames).toMatchObject({ kind: 'output', trigger: 'bound' })
    expect(frames.frames).toHaveLength(4)
    const bytes = await peekText(role.repeat(10), { maxPeekBytes: 200 })
    expect(bytes).toMatchObject({ kind: 'output', trigger: 'bound' })
    expect(bytes.frames).toHaveLength(3)
  })

  it('fails with peek-overflow past maxPeekBytes when only keep-alives came, instead of growing', async () => {
    const bytes = await peekText(': keep-alive\n\n'.repeat(100), { maxPeekBytes: 200 })
    expect(bytes.kind === 'peek-overflow' && bytes.error.message).toContain('maxPeekBytes')
    if (bytes.kind === 'peek-overflow') expect(isPeekOverflowError(bytes.error)).toBe(true)
    expect(peekDefaults).toMatchObject({
      maxPeekBytes: 1_048_576,
      maxPeekFrames: 4096,
      commitOn: 'visible',
    })
  })

  it('keep-alive comments never count toward maxPeekFrames: 10,000 of them, then the answer', async () => {
    const outcome = await peekText(`${': keep-alive\n\n'.repeat(10_000)}${text('Hi')}`)
    expect(outcome).toMatchObject({ kind: 'output', trigger: 'output' })
    expect(outcome.frames).toHaveLength(10_001)
  })

  it("reasoning held under commitOn: 'content' past a bound is committed (trigger 'bound'), never an overflow", async () => {
    const bytes = await peekText(`${role}${reasoning.repeat(200)}${text('Hi')}`, {
      commitOn: 'content',
      maxPeekBytes: 4096,
    })
    expect(bytes).toMatchObject({ kind: 'output', trigger: 'bound' })
    const frames = await peekText(`${role}${reasoning.repeat(200)}${text('Hi')}`, {
      commitOn: 'content',
      maxPeekFrames: 50,
    })
    expect(frames).toMatchObject({ kind: 'output', trigger: 'bound' })
    expect(frames.frames).toHaveLength(51)
  })

  it('reports a frame too large for the reader as peek-overflow', async () => {
    const reader = createFrameReader(
      new Response(`data: ${'x'.repeat(100)}\n\n`).body as ReadableStream<Uint8Array>,
      {
        maxFrameBytes: 50,
      },
    )
    const outcome = await peekFirstOutput(reader, openaiChat)
    expect(outcome.kind === 'peek-overflow' && outcome.error.code).toBe('FRAME_TOO_LARGE')
  })

  it('reports an upstream read failure as read-error', async () => {
    const body = scriptedBody([{ bytes: role }, { error: new TypeError('terminated') }])
    const outcome = await peekFirstOutput(createFrameReader(body.stream), openaiChat)
    expect(outcome.kind === 'read-error' && outcome.error.code).toBe('UPSTREAM_READ_FAILED')
  })

  it('ends with aborted when the signal aborts, with the reason', async () => {
    const controller = new AbortController()
    const body = scriptedBody([{ bytes: role }, { hang: true }])
    const pending = peekFirstOutput(createFrameReader(body.stream), anthropicMessages, {
      signal: controller.signal,
    })
    controller.abort('client gone')
    expect(await pending).toMatchObject({ kind: 'aborted', reason: 'client gone' })
  })

  it('validates options with exact messages', async () => {
    const reader = createFrameReader(new Response('').body as ReadableStream<Uint8Array>)
    await expect(peekFirstOutput(reader, openaiChat, { firstOutputTimeoutMs: 0 })).rejects.toThrow(
      'firstOutputTimeoutMs must be a positive number of milliseconds up to 2147483647, or Infinity to turn it off; got 0',
    )
    await expect(
      peekFirstOutput(reader, openaiChat, { commitOn: 'soon' as never }),
    ).rejects.toThrow("commitOn must be 'visible', 'content' or 'first-frame', got soon")
  })
})
