import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { FrameVerdict } from '../../src/advanced.js'
import {
  classifyEof,
  createFrameReader,
  createStreamTracker,
  type StreamAdapter,
} from '../../src/index.js'
import { chunkings } from '../../src/testing/arbitraries.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll } from '../support/sources.js'
import { adapters, type FixtureExpectation, fixtureBytes, fixtures } from './fixtures.js'

function verdictName(verdict: FrameVerdict): string {
  if (
    verdict.kind === 'text' ||
    verdict.kind === 'tool' ||
    verdict.kind === 'reasoning' ||
    verdict.kind === 'refusal'
  ) {
    return verdict.terminal === undefined ? verdict.kind : `${verdict.kind}+terminal`
  }
  return verdict.kind
}

/** Everything the expectations file states, as observed through a tracker. */
async function observe(adapter: StreamAdapter, chunks: Uint8Array[]) {
  const tracker = createStreamTracker(adapter)
  const verdicts = (await readAll(createFrameReader(chunkSource(chunks)))).map((frame) =>
    tracker.observe(frame),
  )
  const eof = classifyEof(tracker.state)
  const firstError = verdicts.find((v) => v.kind === 'error')
  return {
    verdicts: verdicts.map(verdictName),
    eof: eof.kind,
    text: verdicts.map((v) => (v.kind === 'text' ? v.text : '')).join(''),
    reasoning: verdicts.map((v) => (v.kind === 'reasoning' ? v.text : '')).join(''),
    terminalReason: tracker.state.terminal?.reason ?? null,
    error:
      firstError?.kind === 'error'
        ? { type: firstError.error.type, retryable: firstError.error.retryable }
        : null,
  }
}

function expected(fixture: FixtureExpectation) {
  const { verdicts, eof, text, reasoning, terminalReason, error } = fixture
  return { verdicts, eof, text, reasoning, terminalReason, error }
}

describe('protocol fixtures', () => {
  it('covers every protocol and every EOF class', () => {
    const protocols = new Set(fixtures.map((f) => f.protocol))
    expect([...protocols].sort()).toEqual([
      'anthropic-messages',
      'gemini',
      'openai-chat',
      'openai-responses',
    ])
    const classes = new Set(fixtures.map((f) => f.eof))
    expect([...classes].sort()).toEqual([
      'completed',
      'empty',
      'error-only',
      'partial',
      'thinking-only',
    ])
  })

  describe.each(fixtures.map((f) => [f.file, f] as const))('%s', (_file, fixture) => {
    it(`${fixture.description}: verdicts, text, reasoning, terminal reason, error and EOF class are the same under every chunking`, async () => {
      const bytes = fixtureBytes(fixture.file)
      const adapter = adapters[fixture.protocol]
      expect(await observe(adapter, [bytes])).toEqual(expected(fixture))
      await fc.assert(
        fc.asyncProperty(chunkings(bytes), async (chunks) => {
          expect(await observe(adapter, chunks)).toEqual(expected(fixture))
        }),
        { numRuns: runs(25) },
      )
    })
  })
})
