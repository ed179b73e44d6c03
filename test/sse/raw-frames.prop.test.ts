/**
 * The pump's hot path reads frames as bytes only (`pumpRaw`, `nextRaw`, `takeBufferedRaw`) and asks its
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

  it('lossless framing: after the first frame, pumpRaw hands over the bytes next() yields, in order, whatever the sink pushes back; a failed write ends it with that failure', async () => {
    await fc.assert(
      fc.asyncProperty(
        chunkedSseStream(),
        fc.boolean(),
        fc.array(fc.constantFrom('sync', 'later', 'batch'), { minLength: 1, maxLength: 8 }),
        fc.option(fc.nat({ max: 30 }), { nil: undefined }),
        async ({ bytes, chunks }, stream, pattern, failAt) => {
          const expected = (await readAll(createFrameReader(chunkSource([bytes])))).map(
            describeFrame,
          )
          const reader = createFrameReader(stream ? chunkStream(chunks) : chunkSource(chunks))
          const raw = rawFrameReader(reader)
          if (raw === undefined)
            throw new Error('createFrameReader made a reader without raw reads')
          const got: SseFrame[] = []
          const first = await reader.next()
          if (first === null) return
          got.push(first)
          const view = new FrameView()
          let calls = 0
          const failure = new Error('the sink failed')
          // The sink's push-back holds: no frame is handed over while a write is pending.
          let writing = false
          const ended = await raw.pumpRaw(undefined, (bytes) => {
            expect(writing).toBe(false)
            const how = pattern[calls % pattern.length]
            calls++
            got.push(view.point(bytes).toFrame())
            // A take may take the chunk's further frames itself, as the pump does.
            if (how === 'batch') {
              for (let next = raw.takeBufferedRaw(); next !== null; next = raw.takeBufferedRaw()) {
                got.push(view.point(next).toFrame())
              }
            }
            if (failAt !== undefined && calls === failAt + 1) return Promise.reject(failure)
            if (how !== 'later') return undefined
            writing = true
            return new Promise<void>((resolve) =>
              setTimeout(() => {
                writing = false
                resolve()
              }, 0),
            )
          })
          if (ended !== null) {
            // A failed write ends the hand-over with it, and every frame so far was handed over once.
            expect(ended.failed).toBe(failure)
            expect(got.map(describeFrame)).toEqual(expected.slice(0, got.length))
            await reader.cancel()
            return
          }
          expect(failAt === undefined || calls <= failAt).toBe(true)
          // The end: a last frame the end cut comes from next().
          const last = await reader.next()
          if (last !== null) got.push(last)
          expect(got.map(describeFrame)).toEqual(expected)
          expect(reader.bufferedBytes).toBe(0)
        },
      ),
      { numRuns },
    )
  })

  it('pumpRaw stops at an abort and leaves the pull in flight for the next read: nothing is lost', async () => {
    const encoder = new TextEncoder()
    const frames = ['data: 1\n\n', 'data: 2\n\n', 'data: 3\n\n'].map((f) => encoder.encode(f))
    let release!: () => void
    const gate = new Promise<void>((resolve) => {
      release = resolve
    })
    async function* slow() {
      yield frames[0] as Uint8Array
      yield frames[1] as Uint8Array
      await gate
      yield frames[2] as Uint8Array
    }
    const reader = createFrameReader(slow())
    const raw = rawFrameReader(reader)
    if (raw === undefined) throw new Error('no raw reads')
    expect((await reader.next())?.data).toBe('1')
    const stop = new AbortController()
    const seen: string[] = []
    const pumping = raw.pumpRaw(stop.signal, (bytes) => {
      seen.push(new TextDecoder().decode(bytes))
      return undefined
    })
    await new Promise((resolve) => setTimeout(resolve, 5))
    stop.abort(new Error('stop'))
    await expect(pumping).rejects.toThrow('stop')
    expect(seen).toEqual(['data: 2\n\n'])
    release()
    expect((await reader.next())?.data).toBe('3')
    expect(await reader.next()).toBeNull()
  })
})
