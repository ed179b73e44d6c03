/**
 * A relayed answer's first frame is parsed once: the peek's inspect parses it, and the pump's
 * write and the outcome's identity reuse that parse (`parseData` keeps the last one). The kept
 * parse never answers for other text.
 */
import fc from 'fast-check'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { createMemoryKeyPool, openaiChat, relay } from '../../src/index.js'
import { parseData, parseObject } from '../../src/protocols/common.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { runs } from '../support/runs.js'
import { scriptedUpstream } from '../support/upstream.js'

const data =
  '{"id":"chatcmpl-once","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"logprobs":null,"finish_reason":"stop"}]}'

afterEach(() => {
  vi.restoreAllMocks()
})

describe('the first frame parse', () => {
  it('a 1-frame answer is relayed with its data parsed once, and the outcome still names it', async () => {
    const parse = vi.spyOn(JSON, 'parse')
    const upstream = scriptedUpstream([{ steps: [{ bytes: `data: ${data}\n\n` }] }])
    const outcome = await relay({
      sink: createRecordingSink(),
      pool: createMemoryKeyPool([{ id: 'a', secret: 'sk-test-parse-0123456789' }]),
      adapter: openaiChat,
      attempt: upstream.attempt,
    })
    expect(outcome).toMatchObject({
      kind: 'committed',
      response: { id: 'chatcmpl-once', model: 'gpt-4o' },
    })
    expect(parse.mock.calls.filter(([text]) => text === data)).toHaveLength(1)
  })

  it('parseData answers every text, in any order, as parseObject does', () => {
    const text = fc.oneof(
      fc.json(),
      fc.string(),
      fc.constantFrom('{"a":1}', '{"a":2}', '[1]', 'null', '{'),
    )
    fc.assert(
      fc.property(fc.array(text, { maxLength: 20 }), (texts) => {
        for (const each of texts) expect(parseData(each)).toEqual(parseObject(each))
      }),
      { numRuns: runs(200) },
    )
  })
})
