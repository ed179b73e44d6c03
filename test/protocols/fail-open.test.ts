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
import { chunkSource, readAll, utf8 } from '../support/sources.js'

/**
 * Real traffic the adapters once held as bookkeeping (issue 51): typed content parts, client
 * tool items, server tools' content, and parts no adapter knew. What an adapter does not
 * positively know to be empty is output (guarantee 27).
 */

async function kinds(adapter: StreamAdapter, text: string) {
  const frames = await readAll(createFrameReader(chunkSource([utf8(text)])))
  return frames.map((frame) => {
    const verdict = adapter.inspect(frame)
    return 'text' in verdict ? `${verdict.kind}:${verdict.text}` : verdict.kind
  })
}

async function eofOf(adapter: StreamAdapter, text: string) {
  const tracker = createStreamTracker(adapter)
  for (const frame of await readAll(createFrameReader(chunkSource([utf8(text)])))) {
    tracker.observe(frame)
  }
  return classifyEof(tracker.state).kind
}

const chat = (delta: unknown, finish: string | null = null) =>
  `data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
const responses = (type: string, body: Record<string, unknown>) =>
  `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: 1, ...body })}\n\n`
const anthropic = (type: string, body: Record<string, unknown>) =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`
const gemini = (parts: unknown[], finish?: string) =>
  `data: ${JSON.stringify({ candidates: [{ content: { role: 'model', parts }, ...(finish && { finishReason: finish }) }] })}\n\n`

describe('openai-chat: typed content parts (Mistral) and members it does not know', () => {
  const thinking = chat({
    content: [{ type: 'thinking', thinking: [{ type: 'text', text: 'The user asks' }] }],
  })
  const answer = chat({ content: [{ type: 'text', text: '2 + 2 = 4' }] })

  it('a thinking part is reasoning, a text part is text, and a cut after them is partial', async () => {
    expect(await kinds(openaiChat, thinking + answer)).toEqual([
      'reasoning:The user asks',
      'text:2 + 2 = 4',
    ])
    expect(await eofOf(openaiChat, thinking + answer)).toBe('partial')
    expect(await eofOf(openaiChat, thinking)).toBe('thinking-only')
  })

  it('a part of a type it does not know, or a delta member it does not know, with content is output', async () => {
    expect(
      await kinds(openaiChat, chat({ content: [{ type: 'image_url', image_url: { url: 'x' } }] })),
    ).toEqual(['text:'])
    expect(await kinds(openaiChat, chat({ audio: { id: 'a1', transcript: 'Hi' } }))).toEqual([
      'text:',
    ])
    // Groq's compound models: a built-in tool's call and result.
    const executed = [{ index: 0, type: 'search', arguments: '{"query":"weather"}', output: '' }]
    expect(await kinds(openaiChat, chat({ executed_tools: executed }))).toEqual(['text:'])
  })

  it('a role-only chunk, an empty part list, null members and numbers stay bookkeeping', async () => {
    expect(
      await kinds(
        openaiChat,
        chat({ role: 'assistant', content: '', refusal: null, reasoning_details: [] }) +
          chat({ content: [] }) +
          chat({ role: 'assistant', content: [{ type: 'text', text: '' }], token_id: 22557 }),
      ),
    ).toEqual(['meta', 'meta', 'meta'])
  })
})

describe('openai-chat: what both openai majors (6.x and 7.x) raise on is an error', () => {
  it('a named `event: error` with a flat body is an error, not bookkeeping', async () => {
    const text =
      'event: error\ndata: {"message":"Provider failed","code":"provider_error","type":"server_error"}\n\n'
    const frames = await readAll(createFrameReader(chunkSource([utf8(text)])))
    expect(openaiChat.inspect(frames[0] as never)).toMatchObject({
      kind: 'error',
      error: { type: 'server_error', code: 'provider_error', message: 'Provider failed' },
    })
  })

  it('`[DONE]x` is no clean end (7.x raises on it); `[DONE]` is', async () => {
    expect(await kinds(openaiChat, 'data: [DONE]x\n\n')).toEqual(['error'])
    expect(await kinds(openaiChat, 'data: [DONE]\n\n')).toEqual(['terminal'])
    const frames = await readAll(createFrameReader(chunkSource([utf8('data: [DONE]x\n\n')])))
    expect(openaiChat.clientEndsAt?.(frames[0] as never)).toBe(false)
  })

  it('the quick path never calls output a chunk that a named `event: error` beside it makes an error', async () => {
    const text =
      'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\nevent: error\nid: {}\n\n'
    const [frame] = await readAll(createFrameReader(chunkSource([utf8(text)])))
    expect(openaiChat.inspect(frame as never).kind).toBe('error')
    expect(openaiChat.quickOutput?.(frame as never)).toBe(false)
    const plain = await readAll(createFrameReader(chunkSource([utf8(chat({ content: 'Hi' }))])))
    expect(openaiChat.quickOutput?.(plain[0] as never)).toBe(true)
    const delta = responses('response.output_text.delta', { delta: 'Hi' })
    const named = await readAll(
      createFrameReader(chunkSource([utf8(`${delta.trimEnd()}\nevent: error\nid: {}\n\n`)])),
    )
    expect(openaiResponses.inspect(named[0] as never).kind).toBe('error')
    expect(openaiResponses.quickOutput?.(named[0] as never)).toBe(false)
    const ordinary = await readAll(createFrameReader(chunkSource([utf8(delta)])))
    expect(openaiResponses.quickOutput?.(ordinary[0] as never)).toBe(true)
  })

  it('an event without data is an error (both majors parse its empty data and raise)', async () => {
    expect(await kinds(openaiChat, 'event: ping\n\n')).toEqual(['error'])
    expect(await kinds(openaiResponses, 'event: error\n\n')).toEqual(['error'])
    // An `id:` or `retry:` alone is no event to the SDK.
    expect(await kinds(openaiChat, 'id: 7\n\n')).toEqual(['meta'])
  })
})

describe('openai-responses: client tool items, server items, and events it does not know', () => {
  const added = (item: Record<string, unknown>) =>
    responses('response.output_item.added', { output_index: 0, item })

  it.each([
    [
      'apply_patch_call',
      {
        type: 'apply_patch_call',
        id: 'apc_1',
        call_id: 'call_1',
        status: 'in_progress',
        operation: { type: 'update_file', path: 'a.md', diff: '' },
      },
    ],
    [
      'shell_call',
      { type: 'shell_call', id: 'sh_1', call_id: 'call_2', status: 'in_progress', action: {} },
    ],
    [
      'tool_search_call (client)',
      { type: 'tool_search_call', id: 'ts_1', call_id: 'c', execution: 'client', arguments: {} },
    ],
    [
      'mcp_approval_request',
      { type: 'mcp_approval_request', id: 'mcpr_1', name: 'deploy', server_label: 's' },
    ],
    ['an unknown item with a call id', { type: 'future_call', id: 'f_1', call_id: 'call_9' }],
  ])('an added %s is tool output', async (_name, item) => {
    expect((await kinds(openaiResponses, added(item)))[0]?.startsWith('tool:')).toBe(true)
  })

  it.each([
    ['response.apply_patch_call_operation_diff.delta', 'tool:@@ -1 +1 @@'],
    ['response.shell_call_command.delta', 'tool:@@ -1 +1 @@'],
    ['response.code_interpreter_call_code.delta', 'tool:@@ -1 +1 @@'],
    ['response.image_generation_call.partial_image', 'text:'],
    ['response.future_thing.delta', 'text:'],
  ])('%s with content is %s', async (type, expected) => {
    expect(
      await kinds(openaiResponses, responses(type, { item_id: 'x', delta: '@@ -1 +1 @@' })),
    ).toEqual([expected])
  })

  it('a patch streamed in 4,000 deltas commits at its second frame, and a cut in it is partial', async () => {
    const item = {
      type: 'apply_patch_call',
      id: 'apc_1',
      call_id: 'call_1',
      status: 'in_progress',
      operation: { type: 'update_file', path: 'a.md', diff: '' },
    }
    const diff = responses('response.apply_patch_call_operation_diff.delta', {
      item_id: 'apc_1',
      output_index: 0,
      delta: '+line\n',
    })
    const text = responses('response.created', { response: { id: 'r' } }) + added(item)
    expect(await kinds(openaiResponses, text)).toEqual(['meta', 'tool:'])
    expect(await eofOf(openaiResponses, text + diff.repeat(4000))).toBe('partial')
  })

  it('server-side work that shows nothing yet, lifecycle and status events stay bookkeeping', async () => {
    expect(
      await kinds(
        openaiResponses,
        added({ type: 'web_search_call', id: 'ws_1', status: 'in_progress' }) +
          added({ type: 'tool_search_call', id: 'ts', execution: 'server', call_id: 'c' }) +
          added({ type: 'reasoning', id: 'rs_1', summary: [] }) +
          responses('response.web_search_call.searching', { item_id: 'ws_1' }) +
          responses('response.output_text.done', { item_id: 'm', text: 'the whole text' }) +
          responses('response.future_thing.in_progress', { item_id: 'x', note: 'busy' }) +
          responses('keepalive', {}) +
          responses('response.content_part.added', {
            part: { type: 'output_text', text: '', annotations: [] },
          }) +
          responses('response.output_text.delta', { delta: '', obfuscation: 'a1B2c3' }),
      ),
    ).toEqual(['meta', 'meta', 'meta', 'meta', 'meta', 'meta', 'meta', 'meta', 'meta'])
  })

  it('an event it does not know, with content, is output; without, bookkeeping', async () => {
    expect(
      await kinds(
        openaiResponses,
        responses('response.future_thing', { item_id: 'x', note: 'shown' }) +
          responses('response.future_thing', { item_id: 'x', output_index: 3 }),
      ),
    ).toEqual(['text:', 'meta'])
  })

  it('a named `event: error` whose data has another type is an error (7.x raises on it)', async () => {
    const text =
      'event: error\ndata: {"type":"response.output_text.delta","message":"boom","code":"server_error"}\n\n'
    expect(await kinds(openaiResponses, text)).toEqual(['error'])
  })
})

describe('anthropic-messages: blocks and deltas it does not know, server tool results', () => {
  const start = (block: Record<string, unknown>) =>
    anthropic('content_block_start', { index: 0, content_block: block })
  const delta = (body: Record<string, unknown>) =>
    anthropic('content_block_delta', { index: 0, delta: body })

  it('a server tool result, redacted thinking, and an unknown block with content are output', async () => {
    expect(
      await kinds(
        anthropicMessages,
        start({
          type: 'web_search_tool_result',
          tool_use_id: 'srvtoolu_1',
          content: [{ type: 'web_search_result', url: 'https://example.com', title: 'Example' }],
        }) +
          start({ type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix' }) +
          start({ type: 'future_block', body: 'shown' }) +
          start({ type: 'mcp_tool_use', id: 'mcptoolu_1', name: 'lookup', input: {} }),
      ),
    ).toEqual(['text:', 'reasoning:', 'text:', 'tool:lookup'])
  })

  it('an unknown delta type with content is output; an empty one, or compaction, bookkeeping', async () => {
    expect(
      await kinds(
        anthropicMessages,
        delta({ type: 'future_delta', body: 'shown' }) +
          delta({ type: 'future_delta' }) +
          start({ type: 'compaction', content: 'summary of earlier turns' }) +
          start({ type: 'future_block' }),
      ),
    ).toEqual(['text:', 'meta', 'meta', 'meta'])
  })

  it('an event name the SDK does not act on stays bookkeeping, whatever it carries', async () => {
    expect(await kinds(anthropicMessages, anthropic('future_event', { body: 'x' }))).toEqual([
      'meta',
    ])
  })
})

describe('gemini: parts it does not know, code execution and built-in tools', () => {
  it.each([
    [[{ codeExecutionResult: { outcome: 'OUTCOME_OK', output: '4\n' } }], 'text:'],
    [[{ executableCode: { language: 'PYTHON', code: 'print(2+2)' } }], 'tool:'],
    [[{ toolCall: { toolType: 'GOOGLE_SEARCH', args: { q: 'x' } } }], 'tool:'],
    [[{ toolResponse: { toolType: 'GOOGLE_SEARCH', response: { r: 'y' } } }], 'text:'],
    [[{ fileData: { mimeType: 'image/png', fileUri: 'gs://b/o' } }], 'text:'],
    [[{ futurePart: { body: 'shown' } }], 'text:'],
    [[{ text: '', thoughtSignature: 'CiIBVKhc7' }], 'reasoning:'],
    [[{ text: '' }], 'meta'],
  ])('%j is %s', async (parts, expected) => {
    expect(await kinds(geminiGenerateContent, gemini(parts))).toEqual([expected])
  })

  it('a text part wins over an unknown part before it in the same chunk', async () => {
    expect(
      await kinds(
        geminiGenerateContent,
        gemini([{ inlineData: { data: 'AA==' } }, { text: 'Hi' }]),
      ),
    ).toEqual(['text:Hi'])
  })
})
