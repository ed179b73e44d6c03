import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createFrameReader,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import { runs } from '../support/runs.js'
import { chunkSource, readAll, utf8 } from '../support/sources.js'

/**
 * Guarantee 27: providers add event, item, block and part types every month, so an adapter
 * calls a frame bookkeeping only where it positively knows the frame carries nothing a client
 * shows. Any name it does not know, carrying content, is output: text, tool, reasoning or
 * refusal, never meta, so the peek commits to it and a cut after it is told as partial.
 */

const numRuns = runs(100)
const outputKinds = ['text', 'tool', 'reasoning', 'refusal']

/** A name no protocol uses: a random lowercase word with a prefix no known name has. */
const unknownName = fc.stringMatching(/^[a-z][a-z_]{1,10}$/).map((word) => `zz_${word}`)

/** Content: a non-empty string, maybe nested in objects and arrays under unknown members. */
const content: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.string({ minLength: 1, maxLength: 12 }),
    fc.tuple(unknownName, tie('value')).map(([key, inner]) => ({ [key]: inner })),
    fc.tuple(tie('value'), fc.integer()).map(([inner, n]) => [n, inner]),
  ),
})).value

async function verdictOf(adapter: StreamAdapter, text: string) {
  const [frame] = await readAll(createFrameReader(chunkSource([utf8(text)])))
  if (frame === undefined) throw new Error('no frame')
  return adapter.inspect(frame)
}

const sse = (data: unknown, event?: string) =>
  `${event === undefined ? '' : `event: ${event}\n`}data: ${JSON.stringify(data)}\n\n`

describe('a frame the adapter does not positively know to be empty of client-visible content counts as output', () => {
  it('openai-chat: an unknown delta member, or a content part of an unknown type, with content', async () => {
    await fc.assert(
      fc.asyncProperty(unknownName, content, fc.boolean(), async (name, value, asPart) => {
        const delta = asPart
          ? { role: 'assistant', content: [{ type: name, [`${name}_body`]: value }] }
          : { role: 'assistant', content: '', [name]: value }
        const verdict = await verdictOf(
          openaiChat,
          sse({ id: 'c', choices: [{ index: 0, delta, finish_reason: null }] }),
        )
        expect(outputKinds).toContain(verdict.kind)
      }),
      { numRuns },
    )
  })

  it('openai-responses: an unknown event (a delta or not), or an added item of an unknown type, with content', async () => {
    const shape = fc.constantFrom('event', 'delta-event', 'item')
    await fc.assert(
      fc.asyncProperty(unknownName, content, shape, async (name, value, kind) => {
        const type =
          kind === 'item'
            ? 'response.output_item.added'
            : kind === 'delta-event'
              ? `response.${name}.delta`
              : `response.${name}`
        const body =
          kind === 'item'
            ? { type, output_index: 0, item: { type: name, id: 'x_1', body: value } }
            : { type, sequence_number: 3, item_id: 'x_1', output_index: 0, delta: value }
        const verdict = await verdictOf(openaiResponses, sse(body, type))
        expect(outputKinds).toContain(verdict.kind)
      }),
      { numRuns },
    )
  })

  it('anthropic-messages: a content block or a delta of an unknown type, with content', async () => {
    await fc.assert(
      fc.asyncProperty(unknownName, content, fc.boolean(), async (name, value, block) => {
        const text = block
          ? sse(
              { type: 'content_block_start', index: 1, content_block: { type: name, body: value } },
              'content_block_start',
            )
          : sse(
              { type: 'content_block_delta', index: 1, delta: { type: name, body: value } },
              'content_block_delta',
            )
        const verdict = await verdictOf(anthropicMessages, text)
        expect(outputKinds).toContain(verdict.kind)
      }),
      { numRuns },
    )
  })

  it('gemini: a part of an unknown kind, with content, alone or after an empty text part', async () => {
    await fc.assert(
      fc.asyncProperty(unknownName, content, fc.boolean(), async (name, value, afterEmpty) => {
        const part = { [name]: value }
        const parts = afterEmpty ? [{ text: '' }, part] : [part]
        const verdict = await verdictOf(
          geminiGenerateContent,
          sse({ candidates: [{ content: { role: 'model', parts }, index: 0 }] }),
        )
        expect(outputKinds).toContain(verdict.kind)
      }),
      { numRuns },
    )
  })

  it('and without content (ids, indexes, numbers, empty strings) the same names stay bookkeeping', async () => {
    const empty = fc.constantFrom<unknown>('', null, 0, 7, false, [], {}, [0, 1])
    await fc.assert(
      fc.asyncProperty(unknownName, empty, async (name, value) => {
        const chat = await verdictOf(
          openaiChat,
          sse({ choices: [{ index: 0, delta: { role: 'assistant', [name]: value } }] }),
        )
        const responses = await verdictOf(
          openaiResponses,
          sse({ type: `response.${name}`, sequence_number: 1, item_id: 'x', value }),
        )
        const anthropic = await verdictOf(
          anthropicMessages,
          sse(
            { type: 'content_block_delta', index: 0, delta: { type: name, value } },
            'content_block_delta',
          ),
        )
        const gemini = await verdictOf(
          geminiGenerateContent,
          sse({ candidates: [{ content: { parts: [{ [name]: value }] } }] }),
        )
        expect([chat.kind, responses.kind, anthropic.kind, gemini.kind]).toEqual([
          'meta',
          'meta',
          'meta',
          'meta',
        ])
      }),
      { numRuns },
    )
  })
})
