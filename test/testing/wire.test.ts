import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  classifyEof,
  createFrameReader,
  createStreamTracker,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import { protocolStream } from '../../src/testing/arbitraries.js'
import { wireFor } from '../../src/testing/wire.js'

const shipped: readonly StreamAdapter[] = [
  openaiChat,
  openaiResponses,
  anthropicMessages,
  geminiGenerateContent,
]

/** Reads a writer's whole answer back through the adapter it was picked for. */
async function readBack(adapter: StreamAdapter, frames: readonly string[]) {
  const body = new Response(frames.join('')).body
  if (body === null) throw new Error('no body')
  const reader = createFrameReader(body)
  const tracker = createStreamTracker(adapter)
  let text = ''
  for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
    const verdict = tracker.observe(frame)
    if (verdict.kind === 'text') text += verdict.text
  }
  return { text, eof: classifyEof(tracker.state).kind }
}

describe('wireFor', () => {
  it.each(shipped.map((adapter) => [adapter.name, adapter] as const))(
    "%s: the writer speaks the adapter's own protocol (a whole answer reads back completed)",
    async (_name, adapter) => {
      const wire = wireFor(adapter)
      const frames = [...wire.start(), ...wire.text('Hello '), ...wire.text('world')]
      expect(await readBack(adapter, [...frames, ...wire.finish('stop')])).toEqual({
        text: 'Hello world',
        eof: 'completed',
      })
    },
  )

  it('another copy of a shipped adapter (another module instance) gets the writer of its protocol', () => {
    const copy: StreamAdapter = { ...openaiChat }
    const frames = wireFor(copy).text('hi')
    expect(frames.join('')).toContain('"content":"hi"')
  })

  it('an unknown adapter is refused by name instead of getting an OpenAI Chat writer', () => {
    const custom: StreamAdapter = { ...anthropicMessages, name: 'my-proxy' }
    expect(() => wireFor(custom)).toThrow(/^wireFor: adapter "my-proxy" is not a shipped adapter/)
  })

  it('protocolStream refuses an unknown adapter at the call, before any property runs', () => {
    const custom: StreamAdapter = { ...geminiGenerateContent, name: 'my-gemini' }
    expect(() => protocolStream(custom)).toThrow(TypeError)
    expect(() => protocolStream(custom)).toThrow(/adapter "my-gemini"/)
  })
})
