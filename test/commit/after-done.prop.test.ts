import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { createCommitGate, createFrameReader, deliver } from '../../src/index.js'
import { concatBytes, splitAt } from '../../src/testing/arbitraries.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { scriptedBody } from '../../src/testing/scripted-body.js'
import { adapters, fixtureBytes, fixtures } from '../protocols/fixtures.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll } from '../support/sources.js'

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/**
 * The `openai` SDK stops reading at `data: [DONE]` (Chat and Responses alike): the relay writes
 * nothing after it. For every OpenAI fixture that ends well, up to its `[DONE]` (one appended to
 * a Responses stream), then frames of any kind after it, in any chunking, on the hot path and
 * through a byte rewrite: the client gets exactly the bytes up to `[DONE]`, and the body is
 * released.
 */

const openaiFixtures = fixtures.filter(
  (fixture) =>
    (fixture.protocol === 'openai-chat' || fixture.protocol === 'openai-responses') &&
    fixture.eof === 'completed',
)

/** A fixture's frames up to and including its first `[DONE]` (appended when it has none). */
async function upToDone(file: string): Promise<Uint8Array> {
  const frames = await readAll(createFrameReader(chunkSource([fixtureBytes(file)])))
  const done = frames.findIndex((frame) => frame.data?.startsWith('[DONE]'))
  if (done !== -1) return concatBytes(frames.slice(0, done + 1).map((frame) => frame.raw))
  return concatBytes([...frames.map((frame) => frame.raw), encoder.encode('data: [DONE]\n\n')])
}

const afterDone = fc.array(
  fc.constantFrom(
    'data: {"choices":[{"index":0,"delta":{"content":" more"},"finish_reason":null}]}\n\n',
    'data: {"error":{"type":"server_error","message":"after the end"}}\n\n',
    'data: {"error":"after the end"}\n\n',
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":" more"}\n\n',
    'data: [DONE]\n\n',
    ': keep-alive\n\n',
    'not json at all\n\n',
    'data: {"choices":[{"delta":{"content":" cut',
  ),
  { minLength: 1, maxLength: 4 },
)

describe('nothing after the client’s end of an OpenAI stream reaches the client', () => {
  it('for any frames after [DONE] and any chunking, the client gets exactly the bytes up to [DONE], and the body is released', async () => {
    const cases = fc.record({
      fixture: fc.constantFrom(...openaiFixtures),
      after: afterDone,
      splits: fc.uniqueArray(fc.nat({ max: 6000 }), { maxLength: 8 }),
      rewrite: fc.boolean(),
    })
    await fc.assert(
      fc.asyncProperty(cases, async ({ fixture, after, splits, rewrite }) => {
        const adapter = adapters[fixture.protocol]
        const expected = await upToDone(fixture.file)
        const sent = concatBytes([expected, encoder.encode(after.join(''))])
        const body = scriptedBody(
          splitAt(
            sent,
            [...splits].sort((a, b) => a - b),
          ).map((bytes) => ({ bytes })),
        )
        const sink = createRecordingSink()
        const gate = createCommitGate(sink, { keepAliveIntervalMs: Number.POSITIVE_INFINITY })
        const outcome = await deliver({
          gate,
          body: body.stream,
          adapter,
          ...(rewrite ? { transform: (frame) => frame.raw } : {}),
        })
        expect(outcome.kind).toBe('committed')
        expect(decoder.decode(sink.bytes)).toBe(decoder.decode(expected))
        expect(body.released).toBe(true)
      }),
      { numRuns: runs(100) },
    )
  })
})
