import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import { AdapterConformanceError, arbitraries, checkAdapter } from '../../src/testing/index.js'
import { runs } from '../support/runs.js'

const shipped = [openaiChat, openaiResponses, anthropicMessages, geminiGenerateContent]

describe('checkAdapter', () => {
  it.each(shipped.map((a) => [a.name, a] as const))(
    '%s passes every conformance property on generated streams of every scenario',
    async (_name, adapter) => {
      await checkAdapter(adapter, {
        streams: arbitraries.protocolStream(adapter),
        numRuns: runs(60),
      })
    },
  )

  it.each(shipped.map((a) => [a.name, a] as const))(
    '%s: generated streams end as their scenario says',
    async (_name, adapter) => {
      for (const scenario of arbitraries.protocolScenarios) {
        const [sample] = fc.sample(arbitraries.protocolStream(adapter, scenario), {
          numRuns: 1,
          seed: 7,
        })
        expect(sample?.scenario).toBe(scenario)
      }
    },
  )

  it('reports a thrown exception as a broken property, with the input and a replay seed', async () => {
    const throwing: StreamAdapter = {
      ...openaiChat,
      name: 'throwing',
      inspect: (frame) => {
        JSON.parse(frame.data ?? '')
        return openaiChat.inspect(frame)
      },
    }
    const error = await checkAdapter(throwing, {
      streams: arbitraries.protocolStream(openaiChat),
      numRuns: 50,
    }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(AdapterConformanceError)
    expect((error as AdapterConformanceError).property).toBe(
      'inspect never throws, whatever the bytes',
    )
    expect((error as Error).message).toMatch(/Replay with \{ seed: -?\d+/)
  })

  it('catches a renderer whose error frame its own adapter does not read as an error', async () => {
    const mute: StreamAdapter = {
      ...openaiChat,
      name: 'mute',
      renderError: () => new TextEncoder().encode(': nothing\n\n'),
    }
    await expect(
      checkAdapter(mute, { streams: arbitraries.protocolStream(openaiChat), numRuns: 30 }),
    ).rejects.toMatchObject({
      property: 'renderError writes one well-formed frame classified as error',
    })
  })

  it('catches verdicts that depend on how the bytes were chunked', async () => {
    let calls = 0
    const flaky: StreamAdapter = {
      ...openaiChat,
      name: 'flaky',
      inspect: (frame) => (calls++ % 7 === 3 ? { kind: 'meta' } : openaiChat.inspect(frame)),
    }
    await expect(
      checkAdapter(flaky, {
        streams: arbitraries.protocolStream(openaiChat, 'normal'),
        numRuns: 50,
      }),
    ).rejects.toBeInstanceOf(AdapterConformanceError)
  })
})
