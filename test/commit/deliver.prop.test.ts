import fc from 'fast-check'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  classifyEof,
  createCommitGate,
  createFrameReader,
  createStreamTracker,
  deliver,
} from '../../src/index.js'
import { concatBytes, splitAt } from '../../src/testing/arbitraries.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { type ScriptStep, scriptedBody } from '../../src/testing/scripted-body.js'
import { adapters, fixtureBytes, fixtures } from '../protocols/fixtures.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll } from '../support/sources.js'
import { useFakeClock } from '../support/timers.js'

afterEach(() => {
  vi.useRealTimers()
})

/** An upstream: a fixture, maybe cut after some frames, then a fault, in some chunking. */
const upstream = fc.record({
  file: fc.constantFrom(...fixtures.map((f) => f.file)),
  cut: fc.option(fc.nat({ max: 40 }), { nil: undefined }),
  fault: fc.constantFrom('none', 'hang', 'read-error', 'keepalives'),
  splits: fc.uniqueArray(fc.nat({ max: 4000 }), { maxLength: 12 }),
})

const downstream = fc.record({
  earlyHeaders: fc.boolean(),
  failAfterWrites: fc.option(fc.nat({ max: 8 }), { nil: undefined }),
  onPartialEof: fc.constantFrom('error' as const, 'synthesize-stop' as const),
  onThinkingOnly: fc.constantFrom('error' as const, 'promote-reasoning' as const),
})

async function frameCut(bytes: Uint8Array, cut: number | undefined): Promise<Uint8Array> {
  if (cut === undefined) return bytes
  const frames = await readAll(createFrameReader(chunkSource([bytes])))
  return concatBytes(frames.slice(0, cut).map((f) => f.raw))
}

describe('deliver properties', () => {
  it('nothing reaches the client before commit; after commit the client gets the upstream bytes verbatim then at most one rendered ending; the upstream and every timer are always released', async () => {
    await fc.assert(
      fc.asyncProperty(upstream, downstream, async (up, down) => {
        const fixture = fixtures.find((f) => f.file === up.file) as (typeof fixtures)[number]
        const adapter = adapters[fixture.protocol]
        const sent = await frameCut(fixtureBytes(fixture.file), up.cut)
        const steps: ScriptStep[] = splitAt(
          sent,
          [...up.splits].sort((a, b) => a - b),
        ).map((bytes) => ({ bytes }))
        if (up.fault === 'hang') steps.push({ hang: true })
        if (up.fault === 'read-error') steps.push({ error: new TypeError('terminated') })
        if (up.fault === 'keepalives')
          for (let i = 0; i < 30; i++) steps.push({ wait: 100 }, { bytes: ': ping\n\n' })

        useFakeClock()
        const body = scriptedBody(steps)
        const sink = createRecordingSink()
        if (down.failAfterWrites !== undefined) sink.failWritesAfter(down.failAfterWrites)
        const gate = createCommitGate(sink, {
          earlyHeaders: down.earlyHeaders,
          keepAliveIntervalMs: Number.POSITIVE_INFINITY,
        })
        const pending = deliver({
          gate,
          body: body.stream,
          adapter,
          peek: { firstOutputTimeoutMs: 1000 },
          idleTimeoutMs: 1000,
          onPartialEof: down.onPartialEof,
          onThinkingOnly: down.onThinkingOnly,
        })
        await vi.advanceTimersByTimeAsync(5000)
        const outcome = await pending
        expect(vi.getTimerCount()).toBe(0)
        expect(body.released).toBe(true)

        const content = sink.events.filter((e) => e.type === 'write')
        if (outcome.kind === 'not-committed') {
          // Invariant 5: nothing but (with early headers) the head went out.
          expect(content).toEqual([])
          expect(sink.events.filter((e) => e.type === 'head')).toHaveLength(
            down.earlyHeaders ? 1 : 0,
          )
          return
        }
        // Invariant 4 and lossless relay: the client's bytes start with the upstream's, verbatim.
        const written = sink.bytes
        const relayed = Math.min(written.length, sent.length)
        expect(written.subarray(0, relayed)).toEqual(sent.subarray(0, relayed))
        const end = outcome.pump.end
        if (end.kind === 'client-gone') {
          expect(end.error.reason).toBe('write-failed')
          return
        }
        // What follows the fixture's bytes: the upstream's own keep-alives, then our ending.
        const tail = new TextDecoder()
          .decode(written.subarray(sent.length))
          .replace(/^(: ping\n\n)+/, '')
        // Invariant 10: an abnormal end is the protocol's own error frame, never a fake success.
        const tracker = createStreamTracker(adapter)
        for (const frame of await readAll(createFrameReader(chunkSource([sent]))))
          tracker.observe(frame)
        const eof = classifyEof(tracker.state)
        if (end.kind === 'completed' || end.kind === 'upstream-error') {
          expect(tail).toBe('')
        } else if (end.kind === 'stop-synthesized') {
          expect(down.onPartialEof).toBe('synthesize-stop')
          expect(eof.kind).toBe('partial')
        } else if (end.kind === 'reasoning-promoted') {
          expect(down.onThinkingOnly).toBe('promote-reasoning')
          expect(eof.kind).toBe('thinking-only')
        } else if (end.kind === 'error-written') {
          const rendered = await readAll(
            createFrameReader(chunkSource([new TextEncoder().encode(tail)])),
          )
          expect(rendered.map((f) => adapter.inspect(f).kind)).toEqual(['error'])
        }
      }),
      { numRuns: runs(150) },
    )
  })
})
