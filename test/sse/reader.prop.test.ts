import { createParser } from 'eventsource-parser'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { legacyParseFields } from '../../bench/legacy-parse-fields.js'
import { createFrameReader, isFrameTooLargeError, type SseFrame } from '../../src/index.js'
import { chunkedSseStream, concatBytes } from '../../src/testing/arbitraries.js'
import { runs } from '../support/runs.js'
import { chunkSource, chunkStream, describeFrame, readAll } from '../support/sources.js'

const numRuns = runs(300)

function source(chunks: Uint8Array[], stream: boolean) {
  return stream ? chunkStream(chunks) : chunkSource(chunks)
}

/** What eventsource-parser reports for the whole input fed at once, after the SSE decoding step. */
function reference(bytes: Uint8Array) {
  const input = new TextDecoder().decode(bytes)
  const events: { event: string | undefined; id: string | undefined; data: string }[] = []
  const comments: string[] = []
  const retries: number[] = []
  const parser = createParser({
    onEvent: ({ event, id, data }) => events.push({ event, id, data }),
    onComment: (comment) => comments.push(comment),
    onRetry: (retry) => retries.push(retry),
  })
  parser.feed(input)
  // The spec ends a line at a final CR; eventsource-parser waits for a possible LF instead.
  if (input.endsWith('\r')) parser.feed('\n')
  // Lines of an unterminated tail still report their comments and retry.
  parser.reset({ consume: true })
  return { events, comments, retries }
}

function fieldsOf(frames: SseFrame[]) {
  return {
    events: frames
      .filter((frame) => frame.terminated && frame.data !== undefined)
      .map(({ event, id, data }) => ({ event, id, data: data as string })),
    comments: frames.flatMap((frame) => [...frame.comments]),
    retries: frames.flatMap((frame) => (frame.retry === undefined ? [] : [frame.retry])),
  }
}

describe('frame reader properties', () => {
  it('lossless framing: the raw bytes of all frames concatenate to the input, for every chunking', async () => {
    await fc.assert(
      fc.asyncProperty(chunkedSseStream(), fc.boolean(), async ({ bytes, chunks }, stream) => {
        const reader = createFrameReader(source(chunks, stream))
        const frames = await readAll(reader)
        expect(concatBytes(frames.map((frame) => frame.raw))).toEqual(bytes)
        expect(reader.bufferedBytes).toBe(0)
        // Only the last frame may be unterminated.
        expect(frames.slice(0, -1).every((frame) => frame.terminated)).toBe(true)
      }),
      { numRuns },
    )
  })

  it('spec agreement: parsed events, comments and retries equal eventsource-parser on the whole input', async () => {
    await fc.assert(
      fc.asyncProperty(chunkedSseStream(), async ({ bytes, chunks }) => {
        const frames = await readAll(createFrameReader(chunkSource(chunks)))
        expect(fieldsOf(frames)).toEqual(reference(bytes))
      }),
      { numRuns },
    )
  })

  it('per-frame fields: every frame, event-only and EOF-cut ones included, parses as the previous hand-written parser did', async () => {
    const decoder = new TextDecoder('utf-8', { ignoreBOM: true })
    await fc.assert(
      fc.asyncProperty(chunkedSseStream(), async ({ bytes, chunks }) => {
        const frames = await readAll(createFrameReader(chunkSource(chunks)))
        const bom = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0
        frames.forEach((frame, index) => {
          let text = decoder.decode(frame.raw.subarray(index === 0 ? bom : 0))
          // eventsource-parser drops a BOM read as Latin-1 at the start of the stream only.
          if (index === 0 && text.startsWith('\u00EF\u00BB\u00BF')) text = text.slice(3)
          const { event, data, id, retry, comments } = frame
          expect({ event, data, id, retry, comments }).toEqual(legacyParseFields(text))
        })
      }),
      { numRuns },
    )
  })

  it('peek never splits a frame: interrupted reads, resumed on the same reader, yield the frames of one uninterrupted read', async () => {
    await fc.assert(
      fc.asyncProperty(
        chunkedSseStream(),
        fc.uniqueArray(fc.nat({ max: 40 }), { maxLength: 12 }),
        fc.nat({ max: 15 }),
        async ({ bytes, chunks }, abortAtPull, handOffAfter) => {
          const expected = (await readAll(createFrameReader(chunkSource([bytes])))).map(
            describeFrame,
          )
          const abortAt = new Set(abortAtPull)
          let controller = new AbortController()
          const upstream = chunkSource(chunks, (pull) => {
            if (abortAt.has(pull)) controller.abort(new Error(`interrupted at pull ${pull}`))
          })
          const reader = createFrameReader(upstream)
          // Peek phase: frames read under signals that abort mid-frame or between frames.
          const peeked: SseFrame[] = []
          let interruptions = 0
          let ended = false
          while (peeked.length < handOffAfter) {
            controller = new AbortController()
            try {
              const frame = await reader.next({ signal: controller.signal })
              if (frame === null) {
                ended = true
                break
              }
              peeked.push(frame)
            } catch (error) {
              expect(error).toBe(controller.signal.reason)
              interruptions++
            }
          }
          // Hand-off: the pump continues on the same reader, with what it buffered.
          const pumped = ended ? [] : await readAll(reader)
          expect([...peeked, ...pumped].map(describeFrame)).toEqual(expected)
          expect(interruptions).toBeLessThanOrEqual(abortAt.size)
        },
      ),
      { numRuns },
    )
  })

  it('bounded memory: with maxFrameBytes n the reader never holds more than n bytes between chunks, and fails with FrameTooLargeError at the first larger frame', async () => {
    await fc.assert(
      fc.asyncProperty(
        chunkedSseStream(),
        fc.integer({ min: 1, max: 64 }),
        async ({ bytes, chunks }, n) => {
          const expected = await readAll(createFrameReader(chunkSource([bytes])))
          const firstTooLarge = expected.findIndex((frame) => frame.raw.length > n)
          let held = 0
          let reader: ReturnType<typeof createFrameReader> | undefined
          const upstream = chunkSource(chunks, () => {
            held = Math.max(held, reader?.bufferedBytes ?? 0)
          })
          reader = createFrameReader(upstream, { maxFrameBytes: n })
          const got: SseFrame[] = []
          let failure: unknown
          try {
            for (let frame = await reader.next(); frame; frame = await reader.next())
              got.push(frame)
          } catch (error) {
            failure = error
          }
          expect(held).toBeLessThanOrEqual(n)
          if (firstTooLarge === -1) {
            expect(failure).toBeUndefined()
            expect(got.map(describeFrame)).toEqual(expected.map(describeFrame))
          } else {
            expect(isFrameTooLargeError(failure)).toBe(true)
            expect(got.map(describeFrame)).toEqual(
              expected.slice(0, firstTooLarge).map(describeFrame),
            )
            expect(reader.bufferedBytes).toBe(0)
            expect(upstream.returned || upstream.pulls === chunks.length).toBe(true)
          }
        },
      ),
      { numRuns },
    )
  })
})
