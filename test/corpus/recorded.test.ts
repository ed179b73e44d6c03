/**
 * The recorded corpus (test/fixtures/recorded/): real provider streams recorded by other
 * projects' test suites, judged by the library and by an oracle that never asks it
 * (oracle.ts). Every complete stream is `completed` with the usage its own reports add up to;
 * every cut at a frame boundary before its terminal frame gets the oracle's class and is never
 * `completed`. The relay twins are in recorded-relay.test.ts.
 */
import { describe, expect, it } from 'vitest'
import type { StreamTracker } from '../../src/advanced.js'
import {
  classifyEof,
  createFrameReader,
  createStreamTracker,
  type TokenUsage,
} from '../../src/index.js'
import { chunkSource, readAll } from '../support/sources.js'
import {
  complete,
  expectations,
  judge,
  type Recording,
  readBytes,
  recordings,
  sources,
} from './corpus.js'
import { type CutClass, cutClasses, type FrameCode, type Usage } from './oracle.js'

/** The usage fields the usage rule defines. */
function ruled(usage: TokenUsage | Usage | null | undefined) {
  if (usage === null || usage === undefined) return null
  const { inputTokens, outputTokens, reasoningTokens } = usage
  const out = Object.entries({ inputTokens, outputTokens, reasoningTokens }).filter(
    ([, value]) => value !== undefined,
  )
  return out.length === 0 ? null : Object.fromEntries(out)
}

/** Tracks a whole recording, handing each frame's index to `after` once it is observed. */
async function track(
  recording: Recording,
  after?: (index: number, tracker: StreamTracker) => void,
): Promise<StreamTracker> {
  const tracker = createStreamTracker(recording.adapter)
  const frames = await readAll(createFrameReader(chunkSource([recording.bytes])))
  expect(frames.length, `${recording.file}: frames the reader found`).toBe(recording.frames.length)
  frames.forEach((frame, index) => {
    tracker.observe(frame)
    after?.(index, tracker)
  })
  return tracker
}

/** The frames a cut may keep: every prefix that ends before the first terminal frame. */
function cutsOf(recording: Recording): number {
  const terminal = recording.frames.indexOf('t')
  return terminal === -1 ? recording.frames.length - 1 : terminal
}

describe('the recorded corpus', () => {
  it('holds at least 100 streams from at least 10 provider families, in every protocol', () => {
    expect(recordings.length).toBeGreaterThanOrEqual(100)
    expect(new Set(recordings.map((r) => r.family)).size).toBeGreaterThanOrEqual(10)
    expect(new Set(recordings.map((r) => r.protocol))).toEqual(
      new Set(['openai-chat', 'openai-responses', 'anthropic-messages', 'gemini']),
    )
    expect(complete.length).toBeGreaterThanOrEqual(100)
  })

  it('holds the item and part types issue 51 names, and usage of every shape', () => {
    const text = (pattern: RegExp) =>
      recordings.filter((r) => pattern.test(new TextDecoder().decode(r.bytes))).map((r) => r.file)
    const cases: [string, RegExp][] = [
      ['Mistral typed content parts', /"delta":\{[^}]*"content":\[\{"type":"thinking"/],
      ['apply_patch_call', /"type":"apply_patch_call"/],
      ['shell_call', /"type":"shell_call"/],
      ['local_shell_call', /"type":"local_shell_call"/],
      ['tool_search_call', /"type":"tool_search_call"/],
      ['mcp_approval_request', /"type":"mcp_approval_request"/],
      ['Groq x_groq.usage', /"x_groq":\{[^\n]*"usage":\{/],
      ['xAI reasoning left out of completion_tokens', /"completion_tokens":1,"total_tokens":303/],
      ['Gemini thoughts', /"thought":true/],
      ['Gemini thoughtsTokenCount', /"thoughtsTokenCount"/],
      ['Anthropic message_delta usage', /"type":"message_delta"[^\n]*"input_tokens"/],
      ['Anthropic compaction iterations', /"iterations":\[/],
      ['Responses reasoning summary', /response\.reasoning_summary_text\.delta/],
      ['Anthropic thinking', /"thinking_delta"/],
      [
        'OpenRouter usage on a chunk that repeats a choice after the finish',
        /"finish_reason":null[^\n]*\],"usage":\{"prompt_tokens"/,
      ],
      ['an error after the finish (OpenRouter)', /"error":\{"code":400,"message":"Token limit/],
      ['OpenRouter reasoning_details', /"reasoning_details":\[\{"type":"reasoning\.encrypted"/],
      ['SSE comments (OpenRouter)', /^: OPENROUTER PROCESSING$/m],
    ]
    for (const [name, pattern] of cases) expect(text(pattern), name).not.toEqual([])
    // Streams with only tool calls (no answer text), in every protocol, and reasoning streams.
    const toolOnly: Record<string, [tool: RegExp, text: RegExp]> = {
      'openai-chat': [/"tool_calls":\[\{/, /"content":"[^"]/],
      'openai-responses': [/"type":"function_call"/, /response\.output_text\.delta/],
      'anthropic-messages': [/"type":"tool_use"/, /"text_delta"/],
      gemini: [/"functionCall"/, /"text":"[^"]/],
    }
    for (const [protocol, [tool, answer]] of Object.entries(toolOnly)) {
      const found = complete.filter((r) => {
        const body = new TextDecoder().decode(r.bytes)
        return r.protocol === protocol && tool.test(body) && !answer.test(body)
      })
      expect(found.length, `${protocol}: tool-call-only streams`).toBeGreaterThan(0)
    }
    expect(recordings.filter((r) => r.frames.includes('r')).length).toBeGreaterThan(20)
  })

  it('expectations.json is what the oracle says of each file (CORPUS_WRITE_EXPECTATIONS=1 rewrites it)', () => {
    expect(expectations.map((e) => e.file)).toEqual(sources.map((s) => s.file))
    for (const source of sources) {
      expect(
        expectations.find((e) => e.file === source.file),
        source.file,
      ).toEqual(judge(source, readBytes(source.file)))
    }
  })
})

describe.each(recordings.map((r) => [r.file, r] as const))('%s', (_file, recording) => {
  it(`ends ${recording.final.join(' or ')}`, async () => {
    const tracker = await track(recording)
    const got = classifyEof(tracker.state).kind
    expect(
      recording.final,
      `${recording.file}: class at the end: expected ${recording.final.join(' or ')}, got ${got}`,
    ).toContain(got)
  })

  if (recording.final.includes('completed')) {
    it(`reports the usage of its own final report: ${JSON.stringify(recording.usage)}`, async () => {
      const tracker = await track(recording)
      const got = ruled(tracker.state.usage)
      const want = ruled(recording.usage)
      expect(
        got,
        `${recording.file}: usage ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`,
      ).toEqual(want)
    })
  }

  it(`every cut at a frame boundary before the terminal frame (${cutsOf(recording) + 1} cuts) has the oracle's class, never completed`, async () => {
    const codes = [...recording.frames] as FrameCode[]
    const wrong: string[] = []
    const check = (kept: number, got: string) => {
      const allowed: string[] = cutClasses(codes.slice(0, kept))
      if (!allowed.includes(got)) {
        wrong.push(
          `cut after ${kept} of ${codes.length} frames (${codes.slice(0, kept).join('').slice(-12)}|): expected ${allowed.join(' or ')}, got ${got}`,
        )
      }
    }
    // The cut that keeps nothing, then every prefix the tracker passes through.
    check(0, classifyEof(createStreamTracker(recording.adapter).state).kind)
    const last = cutsOf(recording)
    await track(recording, (index, tracker) => {
      if (index + 1 <= last) check(index + 1, classifyEof(tracker.state).kind)
    })
    if (wrong.length > 0) {
      expect.fail(
        `${recording.file}: ${wrong.length} of ${last + 1} cuts misjudged, first ${Math.min(5, wrong.length)}:\n${wrong.slice(0, 5).join('\n')}`,
      )
    }
  })

  it('the longest cut, as bytes that end there, is judged as the oracle says', async () => {
    const kept = cutsOf(recording)
    const text = new TextDecoder().decode(recording.bytes)
    let end = 0
    for (let i = 0; i < kept; i++) end = text.indexOf('\n\n', end) + 2
    const bytes = new TextEncoder().encode(text.slice(0, end))
    const tracker = createStreamTracker(recording.adapter)
    for (const frame of await readAll(createFrameReader(chunkSource([bytes]))))
      tracker.observe(frame)
    const allowed: CutClass[] = cutClasses([...recording.frames.slice(0, kept)] as FrameCode[])
    const got = classifyEof(tracker.state).kind
    expect(
      allowed,
      `${recording.file}: cut after ${kept} frames: expected ${allowed.join(' or ')}, got ${got}`,
    ).toContain(got)
  })
})
