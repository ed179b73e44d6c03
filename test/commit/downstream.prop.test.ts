import fc from 'fast-check'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  anthropicMessages,
  createCommitGate,
  createFrameReader,
  type DownstreamTransformContext,
  deliver,
  openaiChat,
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

const upstream = fc.record({
  file: fc.constantFrom(...fixtures.map((f) => f.file)),
  cut: fc.option(fc.nat({ max: 40 }), { nil: undefined }),
  fault: fc.constantFrom('none', 'read-error', 'keepalives'),
  splits: fc.uniqueArray(fc.nat({ max: 4000 }), { maxLength: 12 }),
  earlyHeaders: fc.boolean(),
  onPartialEof: fc.constantFrom('error' as const, 'synthesize-stop' as const),
  onThinkingOnly: fc.constantFrom('error' as const, 'promote-reasoning' as const),
})

const decoder = new TextDecoder()

describe('deliver with a downstream side', () => {
  it('the transform sees every upstream frame but keep-alives, in order, with one context, and never a library-written frame; the client gets its output then at most the rendered ending', async () => {
    await fc.assert(
      fc.asyncProperty(upstream, async (up) => {
        const fixture = fixtures.find((f) => f.file === up.file) as (typeof fixtures)[number]
        const adapter = adapters[fixture.protocol]
        let sent = fixtureBytes(fixture.file)
        if (up.cut !== undefined) {
          const frames = await readAll(createFrameReader(chunkSource([sent])))
          sent = concatBytes(frames.slice(0, up.cut).map((f) => f.raw))
        }
        const steps: ScriptStep[] = splitAt(
          sent,
          [...up.splits].sort((a, b) => a - b),
        ).map((bytes) => ({ bytes }))
        if (up.fault === 'read-error') steps.push({ error: new TypeError('terminated') })
        if (up.fault === 'keepalives')
          for (let i = 0; i < 3; i++) steps.push({ wait: 10 }, { bytes: ': ping\n\n' })

        useFakeClock()
        const body = scriptedBody(steps)
        const sink = createRecordingSink()
        const gate = createCommitGate(sink, {
          earlyHeaders: up.earlyHeaders,
          keepAliveIntervalMs: Number.POSITIVE_INFINITY,
        })
        const seen: string[] = []
        const contexts = new Set<DownstreamTransformContext>()
        const pending = deliver({
          gate,
          body: body.stream,
          adapter,
          downstream: {
            adapter,
            transform: (frame, context) => {
              contexts.add(context)
              const text = decoder.decode(frame.raw)
              seen.push(text)
              return text
            },
          },
          peek: { firstOutputTimeoutMs: 1000 },
          idleTimeoutMs: 1000,
          onPartialEof: up.onPartialEof,
          onThinkingOnly: up.onThinkingOnly,
        })
        await vi.advanceTimersByTimeAsync(5000)
        const outcome = await pending
        expect(body.released).toBe(true)
        if (outcome.kind === 'not-committed') {
          expect(seen).toEqual([])
          return
        }
        expect(contexts.size).toBe(1)
        const upstreamFrames = await readAll(createFrameReader(chunkSource([sent])))
        const expected = upstreamFrames
          .filter((frame) => adapter.inspect(frame).kind !== 'keepalive')
          .map((frame) => decoder.decode(frame.raw))
        // Every non-keep-alive upstream frame went through the transform, in order (after a
        // terminal event the pump may stop reading early, so `seen` is a prefix at the end).
        expect(seen).toEqual(expected.slice(0, seen.length))
        if (outcome.pump.end.kind !== 'completed') expect(seen).toEqual(expected)
        const written = decoder.decode(sink.bytes)
        const transformed = seen.join('')
        expect(written.startsWith(transformed)).toBe(true)
        const tail = written.slice(transformed.length)
        const end = outcome.pump.end.kind
        if (end === 'completed' || end === 'upstream-error') expect(tail).toBe('')
        else expect(tail).not.toBe('')
      }),
      { numRuns: runs(100) },
    )
  })
})

describe('one translator at a time', () => {
  it('transform beside a downstream translator is a TypeError naming both, before anything is read', () => {
    const body = new ReadableStream<Uint8Array>({ pull: () => {} })
    expect(() =>
      deliver({
        gate: createCommitGate(createRecordingSink()),
        body,
        adapter: openaiChat,
        transform: (frame) => frame.raw,
        downstream: { adapter: anthropicMessages, transform: () => null },
      }),
    ).toThrow('transform and downstream.transform both translate frames')
  })
})
