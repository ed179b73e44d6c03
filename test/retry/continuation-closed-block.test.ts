import Anthropic from '@anthropic-ai/sdk'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  createMemoryKeyPool,
  createResilientFetch,
  type RelayOutcome,
} from '../../src/index.js'
import { prefillOf, restAfter } from '../../src/testing/prefill.js'
import { wireFor } from '../../src/testing/wire.js'

const anthropicWire = () => wireFor(anthropicMessages)

/**
 * A cut after the text block closed (issue 51, item 8): the attempt sent "Hello world and ",
 * its `content_block_stop`, then the body ended. The relay holds a `content_block_stop` back
 * until the next event shows whether the message goes on, so the continuation extends the
 * same block: one text block "Hello world and more.", never two blocks that the SDK's
 * `finalText()` joins with a space ("Hello world and  more.").
 */

const sse = { 'content-type': 'text/event-stream' }
const answer = 'Hello world and more.'

function upstream(first: string) {
  const bodies: string[] = []
  const fetch = async (_input: string | URL | Request, init?: RequestInit) => {
    const text = typeof init?.body === 'string' ? init.body : ''
    bodies.push(text)
    if (bodies.length === 1) return new Response(first, { headers: sse })
    const wire = anthropicWire()
    const rest = restAfter(prefillOf(anthropicMessages, text) ?? '', [answer]) ?? '!!'
    return new Response([...wire.start(), ...wire.text(rest), ...wire.finish('stop')].join(''), {
      headers: sse,
    })
  }
  return { fetch, bodies }
}

async function read(first: string) {
  const up = upstream(first)
  const outcomes: RelayOutcome[] = []
  const fetch = createResilientFetch({
    fetch: up.fetch,
    pool: createMemoryKeyPool([
      { id: 'a', secret: 'sk-closed-a-1234567890' },
      { id: 'b', secret: 'sk-closed-b-1234567890' },
    ]),
    adapter: anthropicMessages,
    policy: { continueAfterCut: true, backoff: { baseMs: 1 } },
    onOutcome: (o) => outcomes.push(o),
  })
  const client = new Anthropic({ apiKey: 'sk-x', baseURL: 'http://up.test', fetch, maxRetries: 0 })
  const stream = client.messages.stream({
    model: 'c',
    max_tokens: 64,
    messages: [{ role: 'user', content: 'hi' }],
  })
  const message = await stream.finalMessage()
  for (let i = 0; i < 100 && outcomes.length === 0; i++) await new Promise((r) => setTimeout(r, 2))
  return { message, finalText: await stream.finalText(), outcomes, bodies: up.bodies }
}

describe('an Anthropic continuation after a closed block extends the same block', () => {
  const wire = anthropicWire()
  const closedThenCut = [
    ...wire.start(),
    ...wire.text('Hello world '),
    ...wire.text('and '),
    wire.finish('stop')[0],
  ].join('')

  it('a cut right after content_block_stop: one text block, the whole answer', async () => {
    const { message, finalText, outcomes, bodies } = await read(closedThenCut)
    expect(message.content.map((b) => (b.type === 'text' ? b.text : b.type))).toEqual([answer])
    expect(finalText).toBe(answer)
    expect(bodies).toHaveLength(2)
    expect(outcomes[0]).toMatchObject({
      end: { kind: 'completed' },
      continuations: [{ result: 'spliced' }],
    })
  })

  it('a held content_block_stop goes out when the message goes on (no cut): the answer as sent', async () => {
    const w = anthropicWire()
    const whole = [...w.start(), ...w.text(answer), ...w.finish('stop')].join('')
    const { message, outcomes, bodies } = await read(whole)
    expect(message.content.map((b) => (b.type === 'text' ? b.text : b.type))).toEqual([answer])
    expect(bodies).toHaveLength(1)
    expect(outcomes[0]).toMatchObject({ end: { kind: 'completed' } })
  })
})
