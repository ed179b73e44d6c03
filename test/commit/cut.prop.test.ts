import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { createCommitGate, createFrameReader, deliver } from '../../src/index.js'
import { concatBytes, splitAt } from '../../src/testing/arbitraries.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { scriptedBody } from '../../src/testing/scripted-body.js'
import { adapters, fixtureBytes, fixtures } from '../protocols/fixtures.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll } from '../support/sources.js'

const decoder = new TextDecoder()

/** Every whole frame of a fixture, as its bytes. */
async function framesOf(file: string): Promise<Uint8Array[]> {
  const frames = await readAll(createFrameReader(chunkSource([fixtureBytes(file)])))
  return frames.map((frame) => frame.raw)
}

describe('invariant 19: a cut is told', () => {
  it('a clean end of the body inside a frame, after output: the frames before it verbatim, never the cut bytes glued to anything, then the protocol error unless the answer was already whole', async () => {
    const cases = fc.record({
      file: fc.constantFrom(...fixtures.map((fixture) => fixture.file)),
      // Where the body ends: inside frame `at`, after `keep` of its bytes.
      at: fc.nat(),
      keep: fc.nat(),
      splits: fc.uniqueArray(fc.nat({ max: 4000 }), { maxLength: 8 }),
    })
    await fc.assert(
      fc.asyncProperty(cases, async ({ file, at, keep, splits }) => {
        const fixture = fixtures.find((f) => f.file === file) as (typeof fixtures)[number]
        const adapter = adapters[fixture.protocol]
        const frames = await framesOf(file)
        if (frames.length < 2) return
        const index = 1 + (at % (frames.length - 1))
        const cutFrame = frames[index] as Uint8Array
        // Inside the frame: at least one byte of it, never up to its blank line.
        const blank = decoder.decode(cutFrame).search(/(\r\n|\r|\n)(\r\n|\r|\n)$/)
        if (blank <= 1) return
        const kept = 1 + (keep % (blank - 1))
        const before = concatBytes(frames.slice(0, index))
        const sent = concatBytes([before, cutFrame.subarray(0, kept)])
        const body = scriptedBody(
          splitAt(
            sent,
            [...splits].sort((a, b) => a - b),
          ).map((bytes) => ({ bytes })),
        )
        const sink = createRecordingSink()
        const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
        const outcome = await deliver({ gate, body: body.stream, adapter })
        expect(body.released).toBe(true)
        if (outcome.kind !== 'committed') return // the cut came before any output: retryable
        const got = sink.bytes
        const text = decoder.decode(got)
        // Whatever went out is whole frames: it ends with a blank line.
        expect(text).toMatch(/(\r\n|\r|\n)(\r\n|\r|\n)$/)
        // The frames before the cut went out as they came.
        expect(decoder.decode(got.subarray(0, before.length))).toBe(decoder.decode(before))
        const { end } = outcome.pump
        if (end.kind === 'error-written') {
          // After the whole frames: at most the cut frame made whole (when it still read as a
          // frame), then the protocol's error: nothing glued, nothing half.
          const rest = await readAll(createFrameReader(chunkSource([got.subarray(before.length)])))
          expect(rest.every((frame) => frame.terminated)).toBe(true)
          expect(rest.length).toBeGreaterThanOrEqual(1)
          expect(rest.length).toBeLessThanOrEqual(2)
          const last = adapter.inspect(rest.at(-1) as (typeof rest)[number])
          expect(last.kind).toBe('error')
          if (rest.length === 2) {
            const whole = decoder.decode((rest[0] as (typeof rest)[number]).raw)
            expect(whole.startsWith(decoder.decode(cutFrame.subarray(0, kept)))).toBe(true)
          }
          expect(['eof-mid-frame', 'partial-eof', 'thinking-only', 'empty']).toContain(end.cause)
        } else {
          // Only an answer already whole (its terminal came before the cut) ends cleanly, or the
          // upstream's own error frame was the last word.
          expect(['completed', 'upstream-error']).toContain(end.kind)
        }
      }),
      { numRuns: runs(150) },
    )
  })
})
