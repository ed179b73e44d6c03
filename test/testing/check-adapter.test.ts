import { fileURLToPath } from 'node:url'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  anthropicMessages,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import {
  AdapterConformanceError,
  arbitraries,
  type CheckAdapterOptions,
  checkAdapter,
} from '../../src/testing/index.js'
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

const encoder = new TextEncoder()

/** Chat's adapter with one method that throws, as in the user report. */
function throwingIn(method: keyof StreamAdapter): StreamAdapter {
  return {
    ...openaiChat,
    name: 'x',
    [method]: () => {
      throw new TypeError('boom')
    },
  }
}

/** The adapter of the report: fine, except that `data: null` makes its inspect throw. */
function nullThrower(): { adapter: StreamAdapter; nulls: () => number } {
  let nulls = 0
  const adapter: StreamAdapter = {
    ...openaiChat,
    name: 'x',
    inspect: (frame) => {
      if (frame.data === 'null') {
        nulls++
        throw new TypeError('boom')
      }
      return openaiChat.inspect(frame)
    },
  }
  return { adapter, nulls: () => nulls }
}

describe('checkAdapter: frames no protocol sends', () => {
  const seeds = [undefined, undefined, undefined, 1, 2, 3, 42, -1, 2_147_483_647, -2_147_483_648]
  it.each(seeds.map((seed) => [seed === undefined ? 'random' : String(seed), seed] as const))(
    'the default runs catch an inspect that throws on data: null (seed %s)',
    async (_label, seed) => {
      const { adapter } = nullThrower()
      const error = await checkAdapter(adapter, {
        streams: arbitraries.protocolStream(openaiChat),
        ...(seed === undefined ? {} : { seed }),
      }).catch((e: unknown) => e)
      expect(error).toBeInstanceOf(AdapterConformanceError)
      expect((error as AdapterConformanceError).property).toBe(
        'inspect never throws, whatever the bytes',
      )
      expect((error as Error).message).toContain('Input: "data: null\\n\\n"')
    },
  )

  /** The shipped adapter, except that inspect trusts one string field of its own frames. */
  function trusting(
    adapter: StreamAdapter,
    prefix: string,
    field: (body: Record<string, unknown>) => unknown,
  ): StreamAdapter {
    return {
      ...adapter,
      name: 'trusting',
      inspect: (frame) => {
        const verdict = adapter.inspect(frame)
        if (verdict.kind !== 'error' && frame.data?.startsWith(prefix) === true) {
          const value = field(JSON.parse(frame.data) as Record<string, unknown>)
          if (typeof value !== 'string') (value as { at: (i: number) => unknown }).at(0)
        }
        return verdict
      },
    }
  }

  const trusted: readonly (readonly [
    string,
    StreamAdapter,
    string,
    (body: Record<string, unknown>) => unknown,
  ])[] = [
    ['openai-chat', openaiChat, '{"id":"chatcmpl', (body) => body.model],
    [
      'anthropic-messages',
      anthropicMessages,
      '{"type":"content_block_delta"',
      (body) => (body.delta as { type?: unknown } | undefined)?.type ?? '',
    ],
    ['gemini', geminiGenerateContent, '{"candidates"', (body) => body.modelVersion ?? ''],
  ]

  it.each(trusted)(
    '%s: wrong-typed values land at the paths its own frames use (an inspect that trusts one)',
    async (_name, adapter, prefix, field) => {
      for (const seed of [1, 2, 3]) {
        await expect(
          checkAdapter(trusting(adapter, prefix, field), {
            streams: arbitraries.protocolStream(adapter),
            numRuns: 1_000,
            seed,
          }),
        ).rejects.toMatchObject({ property: 'inspect never throws, whatever the bytes' })
      }
    },
  )

  it('random streams carry data: null frames too, not only the corpus', () => {
    const own = arbitraries.protocolStream(openaiChat).map((sample) => sample.bytes)
    const streams = fc.sample(arbitraries.mangledStream(own), { numRuns: 1_000, seed: 5 })
    const decoder = new TextDecoder()
    const withNull = streams.filter((bytes) =>
      /(^|\n)data: null\n\n/.test(decoder.decode(bytes)),
    ).length
    expect(withNull).toBeGreaterThan(100)
  })
})

describe('checkAdapter: an adapter method that throws', () => {
  it.each([
    ['inspect', 'inspect never throws, whatever the bytes'],
    ['renderError', 'renderError writes one well-formed frame classified as error'],
    [
      'renderStop',
      'renderStop after output writes well-formed frames that end the stream completed',
    ],
    ['quickOutput', 'quickOutput vouches only for output frames that neither end nor fail'],
    ['renderReasoningAsText', 'renderReasoningAsText writes visible text, never a keep-alive'],
    ['renderErrorBody', 'renderErrorBody writes a JSON object holding the sanitised message'],
    [
      'renderFromMessage',
      'renderFromMessage writes whole SSE frames its adapter reads, whatever the JSON object',
    ],
    [
      'usageOf',
      'usage is counts of the known fields, in verdicts and from usageOf, whatever the input',
    ],
  ] as const)(
    '%s: the failure names the method and the property "%s"',
    async (method, property) => {
      const error = await checkAdapter(throwingIn(method), {
        streams: arbitraries.protocolStream(openaiChat),
      }).catch((e: unknown) => e)
      expect(error).toBeInstanceOf(AdapterConformanceError)
      expect((error as AdapterConformanceError).property).toBe(property)
      const { message } = error as Error
      expect(message).toContain(`Adapter "x" breaks the property "${property}".`)
      expect(message).toContain(`What went wrong: adapter.${method} threw (TypeError: boom)`)
      // No stack trace in the message: the cause keeps it.
      expect(message).not.toMatch(/\n\s+at /)
      expect((error as Error).cause).toBeInstanceOf(Error)
    },
  )

  it('a renderer that returns the wrong kind of value is named too', async () => {
    const stringly = {
      ...openaiChat,
      name: 'stringly',
      renderStop: () => 'data: [DONE]\n\n',
    } as unknown as StreamAdapter
    const error = await checkAdapter(stringly, {
      streams: arbitraries.protocolStream(openaiChat),
    }).catch((e: unknown) => e)
    expect((error as AdapterConformanceError).property).toBe(
      'renderStop after output writes well-formed frames that end the stream completed',
    )
    expect((error as Error).message).toContain(
      'What went wrong: adapter.renderStop returned something that is not what it must ("data: [DONE]\\n\\n")',
    )
  })
})

describe('checkAdapter: replay', () => {
  it('pasting the reported { seed, path, property } fails the same way on the first run', async () => {
    let renders = 0
    const mute: StreamAdapter = {
      ...openaiChat,
      name: 'mute',
      renderError: () => {
        renders++
        return encoder.encode(': nothing\n\n')
      },
    }
    const streams = arbitraries.protocolStream(openaiChat)
    const first = (await checkAdapter(mute, { streams }).catch((e: unknown) => e)) as Error
    expect(first).toBeInstanceOf(AdapterConformanceError)
    const { seed, path, property } = first as AdapterConformanceError
    expect(first.message).toContain(
      `Replay with { seed: ${seed}, path: '${path}', property: '${property}' }.`,
    )
    renders = 0
    const replayed = await checkAdapter(mute, {
      streams,
      seed,
      path: path as string,
      property,
    }).catch((e: unknown) => e)
    expect(renders).toBe(1)
    expect((replayed as Error).message).toBe(first.message)
  })

  it('replays a failure found in the data corpus on the first run too', async () => {
    const { adapter, nulls } = nullThrower()
    const streams = arbitraries.protocolStream(openaiChat)
    const first = (await checkAdapter(adapter, { streams }).catch((e: unknown) => e)) as Error
    const { seed, path, property } = first as AdapterConformanceError
    const before = nulls()
    const replayed = await checkAdapter(adapter, {
      streams,
      seed,
      path: path as string,
      property,
    }).catch((e: unknown) => e)
    expect(nulls() - before).toBe(1)
    expect((replayed as Error).message).toBe(first.message)
  })

  it('property alone runs just that property', async () => {
    const mute = throwingIn('renderError')
    // inspect would fail first; only renderStop runs, and holds.
    await expect(
      checkAdapter(
        { ...mute, inspect: openaiChat.inspect },
        {
          streams: arbitraries.protocolStream(openaiChat),
          property:
            'renderStop after output writes well-formed frames that end the stream completed',
        },
      ),
    ).resolves.toBeUndefined()
  })
})

describe('checkAdapter: options', () => {
  const streams = arbitraries.protocolStream(openaiChat)

  it.each([
    [{ numRun: 5 }, TypeError, 'checkAdapter: unknown option "numRun"; did you mean "numRuns"?'],
    [{ NUMRUNS: 5 }, TypeError, 'checkAdapter: unknown option "NUMRUNS"; did you mean "numRuns"?'],
    [{ maxRuns: 5 }, TypeError, 'checkAdapter: unknown option "maxRuns"'],
    [{ Seed: 1 }, TypeError, 'checkAdapter: unknown option "Seed"; did you mean "seed"?'],
    [{ paht: '1' }, TypeError, 'checkAdapter: unknown option "paht"; did you mean "path"?'],
    [{ timeout: 1 }, TypeError, 'checkAdapter: unknown option "timeout"'],
    [
      { property: 'inspect never throw, whatever the bytes' },
      TypeError,
      'checkAdapter: unknown property "inspect never throw, whatever the bytes"; did you mean "inspect never throws, whatever the bytes"?',
    ],
    [{ property: 'speed' }, TypeError, 'checkAdapter: unknown property "speed"'],
    [
      { path: '3:1' },
      TypeError,
      'checkAdapter: path needs the seed and property it was reported with',
    ],
    [
      { seed: 1, path: 'x', property: 'inspect never throws, whatever the bytes' },
      TypeError,
      'checkAdapter: path must be a replay path such as "41:2:0", got "x"',
    ],
    [{ numRuns: 0 }, RangeError, 'numRuns must be a positive integer, got 0'],
    [{ seed: 1.5 }, RangeError, 'seed must be an integer, got 1.5'],
    [
      { streams: undefined },
      TypeError,
      'checkAdapter: streams must be a fast-check arbitrary of stream samples',
    ],
  ] as const)('%o is refused: %s', async (extra, type, message) => {
    const options = { streams, ...extra } as unknown as CheckAdapterOptions
    const error = await checkAdapter(openaiChat, options).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(type)
    expect((error as Error).message).toBe(message)
  })

  it('an unknown option is a type error at compile time too', () => {
    // @ts-expect-error: `numRun` is not an option.
    const options: CheckAdapterOptions = { streams, numRun: 5 }
    expect(options).toBeDefined()
  })
})

describe('checkAdapter: usage', () => {
  it('an adapter whose verdicts report a usage that is no count fails the usage property, naming the field', async () => {
    const lying = {
      ...openaiChat,
      name: 'lying',
      inspect: (frame: Parameters<typeof openaiChat.inspect>[0]) => {
        const verdict = openaiChat.inspect(frame)
        return verdict.kind === 'meta' || verdict.kind === 'terminal'
          ? { ...verdict, usage: { inputTokens: -3 } }
          : verdict
      },
    }
    const error = await checkAdapter(lying, {
      streams: arbitraries.protocolStream(openaiChat),
    }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(AdapterConformanceError)
    expect((error as AdapterConformanceError).property).toBe(
      'usage is counts of the known fields, in verdicts and from usageOf, whatever the input',
    )
    expect((error as Error).message).toContain('usage.inputTokens is -3, not a count')
  })
})

describe('docs/testing.md lists the conformance properties', () => {
  it('names every property checkAdapter runs, in its order, and no other', async () => {
    const { readFileSync } = await import('node:fs')
    const source = readFileSync(
      new URL('../../src/testing/check-adapter.ts', import.meta.url),
      'utf8',
    )
    const list = /const propertyNames = \[([\s\S]*?)\] as const/.exec(source)?.[1] ?? ''
    const names = [...list.matchAll(/'([^']+)'/g)].map((m) => m[1])
    const docs = readFileSync(new URL('../../docs/testing.md', import.meta.url), 'utf8')
    const listed = [...docs.matchAll(/^ {2}\d+\. (.+)$/gm)].map((m) => m[1])
    expect(names.length).toBeGreaterThanOrEqual(10)
    expect(listed).toEqual(names)
  })
})

describe('checkAdapter: a failure says how to fix it, and its stack names no file of the library', () => {
  const library = fileURLToPath(new URL('../../src/', import.meta.url))
  /** Stack lines that name a file of the library's own source (which the package does not ship). */
  const libraryFrames = (stack: string | undefined) =>
    (stack ?? '').split('\n').filter((line) => /^\s+at /.test(line) && line.includes(library))

  it('a renderError that drops the message is told about sanitizeMessage', async () => {
    const mute = {
      ...openaiChat,
      name: 'mute',
      renderError: (...[error, state]: Parameters<StreamAdapter['renderError']>) =>
        openaiChat.renderError({ ...error, message: 'Something went wrong' }, state),
    } as StreamAdapter
    const error = await checkAdapter(mute, {
      streams: arbitraries.protocolStream(openaiChat),
      property: 'renderError writes one well-formed frame classified as error',
    }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(AdapterConformanceError)
    const { message, stack, cause } = error as Error
    expect(message).toContain(
      "How to fix: renderError must write the message it is given, sanitised as the library does: put sanitizeMessage(error.message) (from 'stream-boundary/advanced')",
    )
    expect(libraryFrames(stack)).toEqual([])
    expect(libraryFrames((cause as Error).stack)).toEqual([])
    // The caller's frame is kept: this test file.
    expect(stack).toContain('check-adapter.test.ts')
  })

  it('an adapter method that throws: the fix names the method, the cause is the adapter own error', async () => {
    const error = await checkAdapter(throwingIn('inspect'), {
      streams: arbitraries.protocolStream(openaiChat),
    }).catch((e: unknown) => e)
    const { message, stack, cause } = error as Error
    expect(message).toMatch(/\nHow to fix: inspect must return a verdict for every frame/)
    expect(libraryFrames(stack)).toEqual([])
    expect((cause as Error).message).toBe('boom')
  })
})
