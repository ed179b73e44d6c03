/**
 * The pump's hot path reads frames as bytes only (`nextRaw`, `takeBufferedRaw`) and asks its
 * questions through a reused `FrameView`: the same frames, the same bytes and the same fields
 * as frame objects from `next()`, for every chunking.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { createFrameReader, type SseFrame } from '../../src/index.js'
import { FrameView } from '../../src/sse/frame.js'
import { rawFrameReader } from '../../src/sse/reader.js'
import { chunkedSseStream } from '../../src/testing/arbitraries.js'
import { runs } from '../support/runs.js'
import { chunkSource, chunkStream, describeFrame, readAll } from '../support/sources.js'

const numRuns = runs(300)

describe('raw frame reads', () => {
  it('lossless framing: after the first frame, nextRaw and takeBufferedRaw yield the bytes and fields next() yields', async () => {
    await fc.assert(
      fc.asyncProperty(chunkedSseStream(), fc.boolean(), async ({ bytes, chunks }, stream) => {
        const expected = (await readAll(createFrameReader(chunkSource([bytes])))).map(describeFrame)
        const reader = createFrameReader(stream ? chunkStream(chunks) : chunkSource(chunks))
        const raw = rawFrameReader(reader)
        if (raw === undefined) throw new Error('createFrameReader made a reader without raw reads')
        const got: SseFrame[] = []
        const first = await reader.next()
        if (first !== null) got.push(first)
        const view = new FrameView()
        for (let bytes = await raw.nextRaw(); first !== null; bytes = await raw.nextRaw()) {
          if (bytes === null) {
            // The end: a last frame the end cut comes from next().
            const last = await reader.next()
            if (last !== null) got.push(last)
            break
          }
          for (let next: Uint8Array | null = bytes; next !== null; next = raw.takeBufferedRaw()) {
            const seen = view.point(next)
            const frame = seen.toFrame()
            expect([seen.event, seen.data, seen.id, seen.retry, seen.comments]).toEqual([
              frame.event,
              frame.data,
              frame.id,
              frame.retry,
              frame.comments,
            ])
            got.push(frame)
          }
        }
        expect(got.map(describeFrame)).toEqual(expected)
        expect(reader.bufferedBytes).toBe(0)
      }),
      { numRuns },
    )
  })
})
