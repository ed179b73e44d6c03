import { Stream as OpenAIStream } from 'openai/streaming'
import { Stream as OpenAINextStream } from 'openai-next/streaming'
import { describe, expect, it } from 'vitest'
import { judgeObservation } from '../../src/cli/judge.js'
import { openaiChat, openaiResponses, type StreamAdapter } from '../../src/index.js'
import { wireFor } from '../../src/testing/wire.js'

/**
 * The chaos judge against both `openai` majors (6.x pinned, 7.x as `openai-next`): where they
 * read a body differently (7.x raises on a named `event: error` with a flat body, on `[DONE]x`,
 * and on an event without data), the judge takes the reading that never calls a failure
 * silent: any major that raised makes the answer an honest error, never full.
 */

const answer = 'The quick brown fox jumps over the lazy dog.'
const words = (text: string) => text.match(/\S+\s*/g) ?? [text]

async function raises(stream: unknown, text: string): Promise<boolean> {
  const response = new Response(text, { headers: { 'content-type': 'text/event-stream' } })
  const silenced = console.error
  console.error = () => {}
  try {
    const reader = stream as {
      fromSSEResponse(r: Response, c: AbortController): AsyncIterable<unknown>
    }
    for await (const _ of reader.fromSSEResponse(response, new AbortController())) {
      // Reading is all.
    }
    return false
  } catch {
    return true
  } finally {
    console.error = silenced
  }
}

function bodies(adapter: StreamAdapter): Record<string, string> {
  const w = wireFor(adapter)
  const whole = [
    ...w.start(),
    ...words(answer).flatMap((word) => w.text(word)),
    ...w.finish('stop'),
  ]
  const half = whole.slice(0, Math.floor(whole.length / 2)).join('')
  return {
    'half the answer, then a named event: error with a flat body': `${half}event: error\ndata: {"message":"Provider failed","code":"provider_error","type":"server_error"}\n\n`,
    'half the answer, then data: [DONE]x': `${half}data: [DONE]x\n\n`,
    'half the answer, then an event without data': `${half}event: ping\n\n`,
    'the whole answer with data: [DONE]x for its end marker': `${whole
      .join('')
      .replace('data: [DONE]\n\n', '')}data: [DONE]x\n\n`,
  }
}

describe('the judge reads as the strictest openai major', () => {
  for (const adapter of [openaiChat, openaiResponses]) {
    it.each(Object.entries(bodies(adapter)))(`${adapter.name}: %s`, async (_, text) => {
      const raised = [await raises(OpenAIStream, text), await raises(OpenAINextStream, text)]
      expect(raised).toContain(true)
      const judged = await judgeObservation(
        {
          status: 200,
          contentType: 'text/event-stream',
          body: new TextEncoder().encode(text),
          end: 'eof',
        },
        { adapter, answer, reasoning: '' },
      )
      expect(judged.kind).toBe('honest-error')
    })
  }
})
