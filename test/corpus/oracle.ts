/**
 * An oracle for the recorded corpus that does not ask the library: what each frame of a
 * recorded stream is, read from the protocols' own docs, and the usage its reports add up to by
 * the project's usage rule. The tests compare the library's adapters and tracker with it.
 *
 * The rule it follows is "fail open" (docs/guarantees.md, invariant 27): a frame is meta only
 * where it positively carries nothing a client shows (lifecycle events, pings, role-only or
 * empty deltas, usage-only chunks); any other frame with content is output (or reasoning,
 * where the protocol says so). Server-side tool traffic (web search, file search, code
 * interpreter, MCP calls and lists, image generation, Anthropic server tools and their results,
 * compaction, Gemini's executable code and built-in tool parts, grounding) is left open by
 * issue 51: such a frame is `s`, which may be read as meta or as output. An opaque reasoning
 * signature (Anthropic `signature_delta`, a Gemini `thoughtSignature` on an empty part,
 * OpenRouter's `reasoning.encrypted` details) is `q`, meta or reasoning.
 */

export type Protocol = 'openai-chat' | 'openai-responses' | 'anthropic-messages' | 'gemini'

/**
 * One frame, one letter: `k` keep-alive, `m` meta, `o` output (text, tool, refusal), `r`
 * reasoning, `s` server-side (meta or output), `q` signature (meta or reasoning), `e` error,
 * `t` terminal (ends the answer, whatever else it carries).
 */
export type FrameCode = 'k' | 'm' | 'o' | 'r' | 's' | 'q' | 'e' | 't'

export type CutClass = 'empty' | 'thinking-only' | 'partial' | 'error-only'

export interface Usage {
  inputTokens?: number | undefined
  outputTokens?: number | undefined
  reasoningTokens?: number | undefined
}

export interface RawFrame {
  event: string | undefined
  data: string | undefined
}

type Json = Record<string, unknown>

/** The frames of an SSE body written as the corpus is (LF lines, a blank line after each). */
export function splitFrames(body: string): RawFrame[] {
  return body
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      let event: string | undefined
      const data: string[] = []
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim()
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''))
      }
      return { event, data: data.length === 0 ? undefined : data.join('\n') }
    })
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value)

/** Whether a value carries anything: not null, not `""`, not an empty array or object. */
function filled(value: unknown): boolean {
  if (value === null || value === undefined || value === '' || value === false) return false
  if (Array.isArray(value)) return value.some(filled)
  if (isObject(value)) return Object.values(value).some(filled)
  return true
}

/** The strongest of two codes for the same frame (output over reasoning over meta). */
function stronger(a: FrameCode, b: FrameCode): FrameCode {
  const rank: Record<FrameCode, number> = { k: 0, m: 1, q: 2, s: 3, r: 4, o: 5, e: 6, t: 7 }
  return rank[b] > rank[a] ? b : a
}

// --- OpenAI Chat Completions -------------------------------------------------------------------

/** Parts of Mistral's typed `delta.content`: thinking parts are reasoning, the rest output. */
function chatContentPart(part: unknown): FrameCode {
  if (!isObject(part)) return filled(part) ? 'o' : 'm'
  const { type, ...rest } = part
  if (!filled(rest)) return 'm'
  return type === 'thinking' || type === 'reasoning' ? 'r' : 'o'
}

const chatReasoningKeys = new Set(['reasoning_content', 'reasoning', 'thinking'])
/** Labels of a delta, never content: gpt-oss's harmony `channel` (Groq). */
const chatLabels = new Set(['role', 'channel'])

/** OpenRouter's `reasoning_details`: text or a summary is reasoning; encrypted data is opaque. */
function chatReasoningDetails(details: unknown[]): FrameCode {
  let code: FrameCode = 'm'
  for (const detail of details) {
    if (!isObject(detail)) continue
    if (filled(detail.text) || filled(detail.summary)) code = stronger(code, 'r')
    else if (filled(detail.data)) code = stronger(code, 'q')
  }
  return code
}
/** Groq's built-in tools run on the server. */
const chatServerKeys = new Set(['executed_tools'])

function chatDelta(delta: Json): FrameCode {
  let code: FrameCode = 'm'
  for (const [key, value] of Object.entries(delta)) {
    if (chatLabels.has(key) || !filled(value)) continue
    if (key === 'reasoning_details' && Array.isArray(value)) {
      code = stronger(code, chatReasoningDetails(value))
    } else if (key === 'content' && Array.isArray(value)) {
      for (const part of value) code = stronger(code, chatContentPart(part))
    } else if (key === 'tool_calls' && Array.isArray(value)) {
      // An entry with only its index (and empty arguments) names nothing.
      const named = value.some(
        (call) => isObject(call) && (filled(call.id) || filled(call.function) || filled(call.type)),
      )
      if (named) code = stronger(code, 'o')
    } else if (chatReasoningKeys.has(key)) code = stronger(code, 'r')
    else if (chatServerKeys.has(key)) code = stronger(code, 's')
    else code = stronger(code, 'o')
  }
  return code
}

function chatFrame(frame: RawFrame): FrameCode {
  if (frame.data === undefined) return 'k'
  if (frame.data.trim() === '[DONE]') return 't'
  const chunk = JSON.parse(frame.data) as Json
  if (filled(chunk.error)) return 'e'
  let code: FrameCode = 'm'
  let finished = false
  for (const choice of Array.isArray(chunk.choices) ? chunk.choices : []) {
    if (!isObject(choice)) continue
    if (isObject(choice.delta)) code = stronger(code, chatDelta(choice.delta))
    if (filled(choice.finish_reason)) finished = true
  }
  return finished ? 't' : code
}

/** The usage rule for Chat and compatibles: `usage`, else Groq's `x_groq.usage`. */
function chatReport(chunk: Json): Usage | undefined {
  const report = isObject(chunk.usage)
    ? chunk.usage
    : isObject(chunk.x_groq) && isObject(chunk.x_groq.usage)
      ? chunk.x_groq.usage
      : undefined
  if (report === undefined) return undefined
  const input = count(report.prompt_tokens)
  const completion = count(report.completion_tokens)
  const details = report.completion_tokens_details
  const reasoning = isObject(details) ? count(details.reasoning_tokens) : undefined
  const total = count(report.total_tokens)
  // The report's own total says whether reasoning was left out of completion_tokens (xAI).
  const leftOut =
    reasoning !== undefined &&
    reasoning > 0 &&
    input !== undefined &&
    completion !== undefined &&
    total === input + completion + reasoning
  return {
    inputTokens: input,
    outputTokens: completion === undefined ? undefined : completion + (leftOut ? reasoning : 0),
    reasoningTokens: reasoning,
  }
}

// --- OpenAI Responses --------------------------------------------------------------------------

/** Items that run on the provider's side (issue 51 item 3 leaves them open). */
const serverItems = new Set([
  'web_search_call',
  'file_search_call',
  'code_interpreter_call',
  'image_generation_call',
  'mcp_call',
  'mcp_list_tools',
  'compaction',
  'x_search_call',
  'tool_search_output',
  // A shell run in a hosted container, and programmatic tool calling's program, run there too.
  'shell_call_output',
  'program',
  'program_output',
])
/** Items a client acts on: each names a tool or carries a call. */
const clientToolItems = new Set([
  'function_call',
  'custom_tool_call',
  'apply_patch_call',
  'local_shell_call',
  'computer_call',
  'mcp_approval_request',
])
/** Fields that identify or order an item or event, never content. */
const bookkeeping = new Set([
  'type',
  'id',
  'item_id',
  'status',
  'sequence_number',
  'output_index',
  'content_index',
  'summary_index',
  'annotation_index',
  'obfuscation',
  'logprobs',
  'role',
  'phase',
  'call_id',
])

/** Whether anything but bookkeeping is filled in, at any depth. */
function contentOf(value: unknown): boolean {
  if (Array.isArray(value)) return value.some(contentOf)
  if (isObject(value)) {
    return Object.entries(value).some(([key, v]) => !bookkeeping.has(key) && contentOf(v))
  }
  return filled(value)
}

function responsesItem(item: unknown): FrameCode {
  if (!isObject(item)) return 'm'
  const type = String(item.type)
  if (clientToolItems.has(type)) return 'o'
  if (type === 'tool_search_call') return item.execution === 'server' ? 's' : 'o'
  if (type === 'shell_call') {
    const environment = isObject(item.environment) ? item.environment.type : undefined
    return typeof environment === 'string' && environment.startsWith('container') ? 's' : 'o'
  }
  if (serverItems.has(type)) return 's'
  if (type === 'message') return filled(textOf(item.content)) ? 'o' : 'm'
  if (type === 'reasoning') {
    return filled(textOf(item.summary)) || filled(textOf(item.content)) ? 'r' : 'm'
  }
  return contentOf(item) ? 'o' : 'm'
}

/** The texts of content or summary parts (annotations and logprobs left aside). */
function textOf(parts: unknown): string[] {
  if (!Array.isArray(parts)) return []
  return parts.flatMap((part) =>
    isObject(part) ? [part.text, part.refusal].filter((t) => typeof t === 'string') : [],
  ) as string[]
}

const responsesMeta = new Set(['response.created', 'response.in_progress', 'response.queued'])
const serverEventPrefixes = [
  'response.web_search_call.',
  'response.file_search_call.',
  'response.code_interpreter_call',
  'response.image_generation_call.',
  'response.mcp_call',
  'response.mcp_list_tools.',
  'response.x_search_call.',
]

/** Frame codes for a whole Responses stream: an item's events are judged by the item. */
function responsesFrames(frames: RawFrame[]): FrameCode[] {
  const serverSide = new Set<unknown>()
  return frames.map((frame) => {
    if (frame.data === undefined) return 'k'
    // OpenRouter ends its Responses streams with Chat's `[DONE]` too.
    if (frame.data.trim() === '[DONE]') return 't'
    const event = JSON.parse(frame.data) as Json
    const type = String(event.type ?? frame.event)
    if (type === 'response.completed' || type === 'response.incomplete') return 't'
    if (type === 'error' || type === 'response.failed') return 'e'
    if (responsesMeta.has(type)) return 'm'
    if (type === 'response.output_item.added' || type === 'response.output_item.done') {
      const code = responsesItem(event.item)
      if (code === 's') serverSide.add(event.output_index)
      return code
    }
    const ofServerItem =
      serverSide.has(event.output_index) ||
      serverEventPrefixes.some((prefix) => type.startsWith(prefix))
    if (ofServerItem) return contentOf(event) ? 's' : 'm'
    // A `.done` event repeats what its deltas streamed; parts are added empty.
    if (type.endsWith('.done')) return 'm'
    if (!contentOf(event)) return 'm'
    return type.includes('reasoning') ? 'r' : 'o'
  })
}

// --- Anthropic Messages ------------------------------------------------------------------------

/** Block types of Anthropic's server tools and their results, and compaction. */
function anthropicServerBlock(type: string): boolean {
  return (
    type === 'server_tool_use' ||
    type === 'mcp_tool_use' ||
    type === 'compaction' ||
    type.endsWith('_tool_result')
  )
}

function anthropicBlock(block: unknown): FrameCode {
  if (!isObject(block)) return 'm'
  const type = String(block.type)
  if (anthropicServerBlock(type)) return 's'
  if (type === 'tool_use') return 'o'
  if (type === 'redacted_thinking') return 'q'
  if (type === 'thinking') return filled(block.thinking) ? 'r' : filled(block.signature) ? 'q' : 'm'
  if (type === 'text') return filled(block.text) ? 'o' : 'm'
  return contentOf(block) ? 'o' : 'm'
}

function anthropicDelta(delta: unknown, blockType: string | undefined): FrameCode {
  if (!isObject(delta) || !contentOf(delta)) return 'm'
  if (blockType !== undefined && anthropicServerBlock(blockType)) return 's'
  if (delta.type === 'thinking_delta') return 'r'
  if (delta.type === 'signature_delta') return 'q'
  if (delta.type === 'input_json_delta' && blockType === 'server_tool_use') return 's'
  return 'o'
}

/** Frame codes for a whole Anthropic stream: a delta is judged by the block it belongs to. */
function anthropicFrames(frames: RawFrame[]): FrameCode[] {
  const blocks = new Map<unknown, string>()
  return frames.map((frame) => {
    if (frame.data === undefined) return 'k'
    const event = JSON.parse(frame.data) as Json
    switch (event.type ?? frame.event) {
      case 'ping':
        return 'k'
      case 'error':
        return 'e'
      case 'message_stop':
        return 't'
      case 'message_delta':
        return isObject(event.delta) && filled(event.delta.stop_reason) ? 't' : 'm'
      case 'message_start': {
        const message = isObject(event.message) ? event.message : {}
        const content = Array.isArray(message.content) ? message.content : []
        return content.map(anthropicBlock).reduce(stronger, 'm')
      }
      case 'content_block_start':
        if (isObject(event.content_block)) blocks.set(event.index, String(event.content_block.type))
        return anthropicBlock(event.content_block)
      case 'content_block_delta':
        return anthropicDelta(event.delta, blocks.get(event.index))
      case 'content_block_stop':
        return 'm'
      default:
        return contentOf(event) ? 'o' : 'm'
    }
  })
}

// --- Gemini ------------------------------------------------------------------------------------

const geminiServerParts = new Set([
  'executableCode',
  'codeExecutionResult',
  'toolCall',
  'toolResponse',
])

function geminiPart(part: unknown): FrameCode {
  if (!isObject(part)) return 'm'
  let code: FrameCode = 'm'
  for (const [key, value] of Object.entries(part)) {
    if (!filled(value) || key === 'thought') continue
    if (key === 'thoughtSignature') code = stronger(code, 'q')
    else if (key === 'text') code = stronger(code, part.thought === true ? 'r' : 'o')
    else if (geminiServerParts.has(key)) code = stronger(code, 's')
    else code = stronger(code, 'o')
  }
  return code
}

function geminiFrame(frame: RawFrame): FrameCode {
  if (frame.data === undefined) return 'k'
  const chunk = JSON.parse(frame.data) as Json
  if (filled(chunk.error)) return 'e'
  if (isObject(chunk.promptFeedback) && filled(chunk.promptFeedback.blockReason)) return 't'
  let code: FrameCode = 'm'
  let finished = false
  for (const candidate of Array.isArray(chunk.candidates) ? chunk.candidates : []) {
    if (!isObject(candidate)) continue
    const content = isObject(candidate.content) ? candidate.content : {}
    for (const part of Array.isArray(content.parts) ? content.parts : []) {
      code = stronger(code, geminiPart(part))
    }
    if (filled(candidate.groundingMetadata)) code = stronger(code, 's')
    if (filled(candidate.finishReason)) finished = true
  }
  return finished ? 't' : code
}

// --- usage -------------------------------------------------------------------------------------

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined
}

/** The later report wins, field by field; a field it leaves out keeps its earlier value. */
function merge(earlier: Usage | undefined, later: Usage | undefined): Usage | undefined {
  if (later === undefined) return earlier
  const out: Usage = { ...earlier }
  for (const [key, value] of Object.entries(later) as [keyof Usage, number | undefined][]) {
    if (value !== undefined) out[key] = value
  }
  return out
}

function geminiReport(chunk: Json): Usage | undefined {
  const meta = chunk.usageMetadata
  if (!isObject(meta)) return undefined
  const prompt = count(meta.promptTokenCount)
  const toolUse = count(meta.toolUsePromptTokenCount)
  const candidates = count(meta.candidatesTokenCount)
  const thoughts = count(meta.thoughtsTokenCount)
  return {
    inputTokens: prompt === undefined ? undefined : prompt + (toolUse ?? 0),
    outputTokens:
      candidates === undefined && thoughts === undefined
        ? undefined
        : (candidates ?? 0) + (thoughts ?? 0),
    reasoningTokens: thoughts,
  }
}

const anthropicFields = [
  'input_tokens',
  'cache_read_input_tokens',
  'cache_creation_input_tokens',
  'output_tokens',
] as const

/** Anthropic: message_start's usage, then message_delta's replaces it field by field. */
function anthropicUsageOf(payloads: Json[]): Usage | undefined {
  const raw: Record<string, number> = {}
  let thinking: number | undefined
  let iterations: unknown[] | undefined
  let any = false
  for (const event of payloads) {
    const usage =
      event.type === 'message_start' && isObject(event.message)
        ? event.message.usage
        : event.type === 'message_delta'
          ? event.usage
          : undefined
    if (!isObject(usage)) continue
    for (const field of anthropicFields) {
      const value = count(usage[field])
      if (value === undefined) continue
      raw[field] = value
      any = true
    }
    const details = usage.output_tokens_details
    if (isObject(details) && count(details.thinking_tokens) !== undefined) {
      thinking = count(details.thinking_tokens)
    }
    if (Array.isArray(usage.iterations)) iterations = usage.iterations
  }
  if (!any) return undefined
  const inputOf = (u: Json) =>
    (count(u.input_tokens) ?? 0) +
    (count(u.cache_read_input_tokens) ?? 0) +
    (count(u.cache_creation_input_tokens) ?? 0)
  // Iterations that name a model of their own (an advisor's) are that model's, not the request's.
  const billed = iterations?.filter(isObject).filter((u) => u.model === undefined)
  const out: Usage = {}
  if (billed !== undefined && billed.length > 0) {
    out.inputTokens = billed.reduce((sum, u) => sum + inputOf(u), 0)
    out.outputTokens = billed.reduce((sum, u) => sum + (count(u.output_tokens) ?? 0), 0)
  } else {
    if (raw.input_tokens !== undefined) out.inputTokens = inputOf(raw)
    if (raw.output_tokens !== undefined) out.outputTokens = raw.output_tokens
  }
  if (thinking !== undefined) out.reasoningTokens = thinking
  return out
}

function responsesReport(event: Json): Usage | undefined {
  if (event.type !== 'response.completed' && event.type !== 'response.incomplete') return undefined
  const usage = isObject(event.response) ? event.response.usage : undefined
  if (!isObject(usage)) return undefined
  const details = usage.output_tokens_details
  return {
    inputTokens: count(usage.input_tokens),
    outputTokens: count(usage.output_tokens),
    reasoningTokens: isObject(details) ? count(details.reasoning_tokens) : undefined,
  }
}

/** The usage a stream reported, by the usage rule; `undefined` when it reported none. */
export function expectedUsage(protocol: Protocol, frames: RawFrame[]): Usage | undefined {
  const payloads = frames.flatMap((frame) => {
    if (frame.data === undefined || frame.data.trim() === '[DONE]') return []
    const value: unknown = JSON.parse(frame.data)
    return isObject(value) ? [value] : []
  })
  let usage: Usage | undefined
  if (protocol === 'anthropic-messages') usage = anthropicUsageOf(payloads)
  else {
    const report =
      protocol === 'openai-chat'
        ? chatReport
        : protocol === 'gemini'
          ? geminiReport
          : responsesReport
    for (const payload of payloads) usage = merge(usage, report(payload))
  }
  if (usage === undefined) return undefined
  const defined = Object.entries(usage).filter(([, value]) => value !== undefined)
  return defined.length === 0 ? undefined : (Object.fromEntries(defined) as Usage)
}

// --- frames and cuts ---------------------------------------------------------------------------

/** Every frame's code. */
export function frameCodes(protocol: Protocol, frames: RawFrame[]): FrameCode[] {
  switch (protocol) {
    case 'openai-chat':
      return frames.map(chatFrame)
    case 'openai-responses':
      return responsesFrames(frames)
    case 'anthropic-messages':
      return anthropicFrames(frames)
    case 'gemini':
      return frames.map(geminiFrame)
  }
}

/**
 * The classes a stream cut after these frames may be given: one class, or a range where a
 * frame is left open (`s`, `q`). Output wins over reasoning, reasoning over an error.
 */
export function cutClasses(codes: readonly FrameCode[]): CutClass[] {
  const lowest = (code: FrameCode) => (code === 's' || code === 'q' ? 'm' : code)
  const highest = (code: FrameCode) => (code === 's' ? 'o' : code === 'q' ? 'r' : code)
  const error = codes.includes('e')
  const ladder: CutClass[] = [error ? 'error-only' : 'empty', 'thinking-only', 'partial']
  const rung = (read: (code: FrameCode) => FrameCode) => {
    const seen = codes.map(read)
    return seen.includes('o') ? 2 : seen.includes('r') ? 1 : 0
  }
  return ladder.slice(rung(lowest), rung(highest) + 1)
}

/**
 * How the whole recording ends: `completed` when it has a terminal frame. An error after the
 * terminal frame (OpenRouter's "Token limit reached" after `finish_reason: length`) is left open
 * by issue 51 item 10: `completed`, or the class of what came before.
 */
export function finalClass(codes: readonly FrameCode[]): (CutClass | 'completed')[] {
  const terminal = codes.indexOf('t')
  if (terminal === -1) return cutClasses(codes)
  if (!codes.slice(terminal).includes('e')) return ['completed']
  return ['completed', ...cutClasses(codes)]
}
