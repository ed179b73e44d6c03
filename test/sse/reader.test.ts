import { describe, expect, it } from 'vitest'
import { frameReaderDefaults } from '../../src/advanced.js'
import {
  createFrameReader,
  FrameTooLargeError,
  isFrameTooLargeError,
  isReaderBusyError,
  isUpstreamReadError,
  UpstreamReadError,
} from '../../src/index.js'
import { FrameView } from '../../src/sse/frame.js'
import { chunkSource, chunkStream, readAll, text, utf8 } from '../support/sources.js'

const read = (chunks: (string | Uint8Array)[]) =>
  readAll(createFrameReader(chunkSource(chunks.map((c) => (typeof c === 'string' ? utf8(c) : c)))))

describe('createFrameReader', () => {
  it('splits LF, CR and CRLF frames, mixed in one stream', async () => {
    const frames = await read(['data: a\n\nevent: e\rdata: b\r\rid: 7\r\ndata: c\r\n\r\n'])
    expect(frames.map((f) => text(f.raw))).toEqual([
      'data: a\n\n',
      'event: e\rdata: b\r\r',
      'id: 7\r\ndata: c\r\n\r\n',
    ])
    expect(frames.map((f) => [f.event, f.data, f.id])).toEqual([
      [undefined, 'a', undefined],
      ['e', 'b', undefined],
      [undefined, 'c', '7'],
    ])
  })

  it('keeps the LF of a CRLF that arrives in the next chunk with its frame', async () => {
    const frames = await read(['data: a\r\n\r', '\ndata: b\r', '\n\r', '\n'])
    expect(frames.map((f) => text(f.raw))).toEqual(['data: a\r\n\r\n', 'data: b\r\n\r\n'])
  })

  it('delivers a blank line ended by a final CR at end of input as a whole frame', async () => {
    const frames = await read(['data: a\r\r'])
    expect(frames).toHaveLength(1)
    expect(frames[0]?.terminated).toBe(true)
    expect(frames[0]?.data).toBe('a')
  })

  it('joins multi-line data with LF and collects comments, id and retry', async () => {
    const [frame] = await read([
      ': hello\n:  two spaces\ndata: one\ndata:two\ndata\nid: x\nretry: 1500\nretry: nope\n\n',
    ])
    expect(frame?.data).toBe('one\ntwo\n')
    expect(frame?.comments).toEqual(['hello', ' two spaces'])
    expect(frame?.id).toBe('x')
    expect(frame?.retry).toBe(1500)
  })

  it('leaves data undefined for a frame without a data field', async () => {
    const [frame] = await read([': keep-alive\n\n'])
    expect(frame?.data).toBeUndefined()
    expect(frame?.comments).toEqual(['keep-alive'])
  })

  it('keeps event and id of a frame without data, and reads an empty data line as an empty string', async () => {
    const [ping, empty] = await read(['event: ping\nid: 7\n\ndata:\n\n'])
    expect([ping?.event, ping?.id, ping?.data]).toEqual(['ping', '7', undefined])
    expect(empty?.data).toBe('')
  })

  it('gives each frame its own id, where EventSource would carry the last one over', async () => {
    const frames = await read(['id: 1\ndata: a\n\ndata: b\n\n'])
    expect(frames.map((frame) => frame.id)).toEqual(['1', undefined])
  })

  it('parses a frame ended by a blank line of one CR at a chunk end, with or without the LF that follows', async () => {
    const frames = await read(['data: a\r\r', '\ndata: b\r\r', 'data: c\r'])
    expect(frames.map((frame) => [frame.data, frame.terminated])).toEqual([
      ['a', true],
      ['b', true],
      ['c', false],
    ])
  })

  it('removes one leading BOM from the fields but keeps it in raw', async () => {
    const bom = Uint8Array.of(0xef, 0xbb, 0xbf)
    const frames = await read([bom.subarray(0, 1), bom.subarray(1), 'data: a\n\n\uFEFFdata: b\n\n'])
    expect(Array.from(frames[0]?.raw.subarray(0, 3) ?? [])).toEqual([0xef, 0xbb, 0xbf])
    expect(frames[0]?.data).toBe('a')
    // A BOM later in the stream is an ordinary character: that line names an unknown field.
    expect(frames[1]?.data).toBeUndefined()
  })

  it('reads a BOM turned to mojibake (ï»¿) later in the stream as part of a field name, as eventsource-parser does', async () => {
    const mojibake = Uint8Array.of(0xc3, 0xaf, 0xc2, 0xbb, 0xc2, 0xbf)
    for (const chunks of [
      ['data: a\n\n', mojibake, 'data: b\n\n'],
      [utf8('data: a\n\n\u00EF\u00BB\u00BFdata: b\n\n')],
    ]) {
      const frames = await read(chunks)
      expect(frames.map((frame) => frame.data)).toEqual(['a', undefined])
    }
    // The view the pump's hot loop reads frames through never sees the stream's start.
    expect(new FrameView().point(utf8('\u00EF\u00BB\u00BFdata: b\n\n')).data).toBeUndefined()
  })

  it('treats a BOM followed by a blank line as an empty first frame', async () => {
    const frames = await read(['\uFEFF\ndata: a\n\n'])
    expect(frames.map((f) => f.raw.length)).toEqual([4, 9])
    expect(frames[1]?.data).toBe('a')
  })

  it('decodes multibyte characters split across chunks', async () => {
    const bytes = utf8('data: 中文 😀\n\n')
    const chunks = Array.from(bytes, (byte) => Uint8Array.of(byte))
    const frames = await readAll(createFrameReader(chunkSource(chunks)))
    expect(frames[0]?.data).toBe('中文 😀')
  })

  it('replaces invalid UTF-8 in fields and keeps the bytes untouched in raw', async () => {
    const bytes = Uint8Array.of(...utf8('data: a'), 0xff, 0xe2, 0x82, ...utf8('\n\n'))
    const [frame] = await read([bytes])
    expect(frame?.data).toBe('a\uFFFD\uFFFD')
    expect(Array.from(frame?.raw ?? [])).toEqual(Array.from(bytes))
  })

  it('delivers a trailing frame cut by EOF with terminated: false, parsing its last line', async () => {
    const frames = await read(['data: {"a":1}\n\ndata: {"finish_reason":"stop"}'])
    expect(frames.map((f) => f.terminated)).toEqual([true, false])
    expect(frames[1]?.data).toBe('{"finish_reason":"stop"}')
  })

  it('returns a non-SSE body (an HTML error page) as one unterminated frame, losing nothing', async () => {
    const html = '<html><head><title>502 Bad Gateway</title></head>\n<body>nginx</body></html>\n'
    const frames = await read([html])
    expect(frames).toHaveLength(1)
    expect(text(frames[0]?.raw ?? new Uint8Array())).toBe(html)
    expect(frames[0]?.terminated).toBe(false)
    expect(frames[0]?.data).toBeUndefined()
  })

  it('returns null at once for an empty body', async () => {
    expect(await read([])).toEqual([])
  })

  it('hands out a frame inside one chunk as a view of that chunk (no copy)', async () => {
    const chunk = utf8('data: a\n\ndata: b\n\n')
    const reader = createFrameReader(chunkSource([chunk]))
    const frame = await reader.next()
    expect(frame?.raw.buffer).toBe(chunk.buffer)
    expect(reader.bufferedBytes).toBe(9)
  })

  it('fails a frame larger than maxFrameBytes with FrameTooLargeError and releases the upstream', async () => {
    const stream = chunkStream([
      utf8('data: ok\n\n'),
      utf8(`data: ${'x'.repeat(100)}`),
      utf8('x'.repeat(100)),
    ])
    const reader = createFrameReader(stream, { maxFrameBytes: 64 })
    expect((await reader.next())?.data).toBe('ok')
    const error = await reader.next().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(FrameTooLargeError)
    expect(isFrameTooLargeError(error)).toBe(true)
    expect(error).toMatchObject({ code: 'FRAME_TOO_LARGE', limit: 64, received: 106 })
    expect(reader.bufferedBytes).toBe(0)
    await Promise.resolve()
    expect(stream.cancelled).toBeInstanceOf(FrameTooLargeError)
    // The failure is sticky: the reader does not pretend the stream went on.
    await expect(reader.next()).rejects.toBe(error)
  })

  it('documents a 1 MiB default bound and rejects invalid options with exact messages', () => {
    expect(frameReaderDefaults.maxFrameBytes).toBe(1024 * 1024)
    expect(() => createFrameReader(chunkSource([]), { maxFrameBytes: 0 })).toThrow(
      'maxFrameBytes must be a positive integer, got 0',
    )
  })

  it('rejects next() with the signal reason mid-frame and continues the same frame afterwards', async () => {
    let release: (() => void) | undefined
    const gate = new Promise<void>((resolve) => {
      release = resolve
    })
    async function* upstream() {
      yield utf8('data: first\n\ndata: hel')
      await gate
      yield utf8('lo\n\n')
    }
    const reader = createFrameReader(upstream())
    expect((await reader.next())?.data).toBe('first')
    const signal = AbortSignal.timeout(20)
    const error = await reader.next({ signal }).catch((e: unknown) => e)
    expect(error).toBe(signal.reason)
    expect((error as Error).name).toBe('TimeoutError')
    expect(reader.bufferedBytes).toBe(9)
    release?.()
    const frame = await reader.next()
    expect(text(frame?.raw ?? new Uint8Array())).toBe('data: hello\n\n')
    expect(await reader.next()).toBeNull()
  })

  it('rejects at once for an already aborted signal without reading', async () => {
    const upstream = chunkSource([utf8('data: a\n\n')])
    const reader = createFrameReader(upstream)
    const controller = new AbortController()
    controller.abort(new Error('gone'))
    await expect(reader.next({ signal: controller.signal })).rejects.toThrow('gone')
    expect(upstream.pulls).toBe(0)
    expect((await reader.next())?.data).toBe('a')
  })

  it('refuses overlapping next() calls with ReaderBusyError', async () => {
    const reader = createFrameReader(chunkSource([utf8('data: a\n\n')]))
    const first = reader.next()
    const second = reader.next().catch((e: unknown) => e)
    expect(isReaderBusyError(await second)).toBe(true)
    expect((await first)?.data).toBe('a')
  })

  it('wraps an upstream failure in UpstreamReadError and keeps the bytes that arrived', async () => {
    const reset = Object.assign(new Error('read ECONNRESET https://api.example/v1?key=sk-secret'), {
      code: 'ECONNRESET',
    })
    async function* upstream() {
      yield utf8('data: a\n\ndata: par')
      throw reset
    }
    const reader = createFrameReader(upstream())
    expect((await reader.next())?.data).toBe('a')
    const error = await reader.next().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(UpstreamReadError)
    expect(isUpstreamReadError(error)).toBe(true)
    expect((error as UpstreamReadError).cause).toBe(reset)
    expect((error as Error).message).toBe('Reading the upstream body failed (ECONNRESET)')
    expect((error as Error).message).not.toContain('sk-secret')
    expect(reader.bufferedBytes).toBe(9)
  })

  it('cancel() releases a ReadableStream upstream with the reason and drops the buffer', async () => {
    const stream = chunkStream([utf8('data: a\n\ndata: b'), utf8('\n\n')])
    const reader = createFrameReader(stream)
    await reader.next()
    expect(reader.bufferedBytes).toBe(7)
    await reader.cancel('client gone')
    expect(stream.cancelled).toBe('client gone')
    expect(reader.bufferedBytes).toBe(0)
    expect(reader.done).toBe(true)
    expect(await reader.next()).toBeNull()
  })

  it('cancel() returns an AsyncIterable upstream', async () => {
    const upstream = chunkSource([utf8('data: a\n\n'), utf8('data: b\n\n')])
    const reader = createFrameReader(upstream)
    await reader.next()
    await reader.cancel()
    expect(upstream.returned).toBe(true)
  })

  it('reads a real fetch Response body', async () => {
    const response = new Response('event: ping\ndata: {}\n\n')
    const frames = await readAll(createFrameReader(response.body as ReadableStream<Uint8Array>))
    expect(frames.map((f) => f.event)).toEqual(['ping'])
  })

  it('serialises a frame to plain data', async () => {
    const [frame] = await read(['event: x\ndata: y\n\n'])
    expect(JSON.parse(JSON.stringify(frame))).toEqual({
      event: 'x',
      data: 'y',
      comments: [],
      terminated: true,
      bytes: 18,
    })
  })
})

describe('createFrameReader with one signal across calls', () => {
  it('a cancel while next() waits resolves that call with null', async () => {
    const never = new ReadableStream<Uint8Array>({ pull: () => new Promise(() => {}) })
    const reader = createFrameReader(never)
    const controller = new AbortController()
    const pending = reader.next({ signal: controller.signal })
    await reader.cancel('gone')
    expect(await pending).toBeNull()
  })

  it('keeps one abort listener on a signal reused for every frame, and removes it at the end', async () => {
    const controller = new AbortController()
    let listeners = 0
    const signal = controller.signal
    const add = signal.addEventListener.bind(signal)
    const remove = signal.removeEventListener.bind(signal)
    signal.addEventListener = ((...args: Parameters<typeof add>) => {
      listeners++
      add(...args)
    }) as typeof add
    signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
      listeners--
      remove(...args)
    }) as typeof remove
    const reader = createFrameReader(
      chunkSource([utf8('data: a\n\n'), utf8('data: b\n\n'), utf8('data: c\n\n')]),
    )
    const seen: (string | undefined)[] = []
    for (let frame = await reader.next({ signal }); frame; frame = await reader.next({ signal })) {
      seen.push(frame.data)
      expect(listeners).toBeLessThanOrEqual(1)
    }
    expect(seen).toEqual(['a', 'b', 'c'])
    expect(listeners).toBe(0)
  })
})
