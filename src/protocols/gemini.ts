/**
 * Gemini `streamGenerateContent?alt=sse`: `data:` frames, each a `GenerateContentResponse`
 * with `candidates[].content.parts[]` and a `finishReason` on the last one.
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'
import { endsWithObject, includes, needle, startsWith } from './bytes.js'
import {
  carriesContent,
  encode,
  field,
  inspectWithoutData,
  malformedFrame,
  mapReason,
  parseData,
  renderable,
  sseFrameText,
  stringField,
  textField,
  unknownOutput,
  upstreamError,
} from './common.js'
import { fitGeminiBudget } from './request.js'
import type {
  ErrorVerdict,
  FrameVerdict,
  OutputVerdict,
  RenderableError,
  RenderState,
  StreamAdapter,
  TerminalInfo,
  TerminalReason,
  UpstreamRequest,
} from './types.js'
import { geminiUsage, withUsage } from './usage.js'

const dataObject = needle('data: {')
const candidatesKey = needle('"candidates"', 4)
const finishKey = needle('"finishReason"', 7)
const errorKey = needle('"error"', 2)
const blockKey = needle('"blockReason"', 6)

const reasons: Readonly<Record<string, TerminalReason>> = {
  STOP: 'stop',
  MAX_TOKENS: 'length',
  SAFETY: 'content_filter',
  RECITATION: 'content_filter',
  BLOCKLIST: 'content_filter',
  PROHIBITED_CONTENT: 'content_filter',
  SPII: 'content_filter',
  IMAGE_SAFETY: 'content_filter',
  MALFORMED_FUNCTION_CALL: 'error',
}

function geminiError(body: Record<string, unknown>): ErrorVerdict | undefined {
  const error = body.error
  if (typeof error !== 'object' || error === null) return undefined
  const status = field(error, 'code')
  const type = stringField(error, 'status') ?? 'UNKNOWN'
  return {
    kind: 'error',
    error: upstreamError(
      type,
      stringField(error, 'message'),
      null,
      typeof status === 'number' ? status : null,
    ),
  }
}

/**
 * Part members that are tool output: the model's function calls and the code it writes, and
 * the built-in tools' calls (`toolCall`) and their results (`toolResponse`,
 * `codeExecutionResult`), which the client shows as part of the answer.
 */
const toolMembers = ['functionCall', 'executableCode', 'toolCall'] as const
const resultMembers = ['codeExecutionResult', 'toolResponse', 'functionResponse'] as const
/** Part members that are never shown: the thought flag and signature, metadata. */
const notContent: ReadonlySet<string> = new Set([
  'thought',
  'thoughtSignature',
  'partMetadata',
  'videoMetadata',
  'mediaResolution',
])

/** What the parts of a candidate carry: the first text, a tool, other output, reasoning. */
interface PartFinds {
  tool?: string | undefined
  reasoning?: string | undefined
  output?: true
}

function readPart(part: unknown, finds: PartFinds): string | undefined {
  const text = textField(part, 'text')
  if (field(part, 'thought') === true) {
    finds.reasoning ??= text ?? ''
    return undefined
  }
  if (text !== undefined) return text
  for (const member of toolMembers) {
    const value = field(part, member)
    if (value !== undefined && value !== null) finds.tool ??= stringField(value, 'name') ?? ''
  }
  if (resultMembers.some((member) => carriesContent(field(part, member), notContent)))
    finds.output = true
  // A part of a kind the adapter does not know (inlineData, fileData, a new one): output when
  // it carries content (fail open). A signature alone belongs to the reasoning before it.
  else if (carriesContent(part, notContent)) finds.output = true
  else if (textField(part, 'thoughtSignature') !== undefined) finds.reasoning ??= ''
  return undefined
}

function partsVerdict(parts: unknown): Omit<OutputVerdict, 'terminal'> | undefined {
  if (!Array.isArray(parts)) return undefined
  const finds: PartFinds = {}
  for (const part of parts) {
    const text = readPart(part, finds)
    if (text !== undefined) return { kind: 'text', text }
  }
  if (finds.tool !== undefined) return { kind: 'tool', text: finds.tool }
  if (finds.output === true) return unknownOutput
  if (finds.reasoning !== undefined) return { kind: 'reasoning', text: finds.reasoning }
  return undefined
}

function inspectResponse(body: Record<string, unknown>): FrameVerdict {
  const error = geminiError(body)
  if (error !== undefined) return error
  const candidates = body.candidates
  const candidate = Array.isArray(candidates) ? candidates[0] : undefined
  if (candidate === undefined) {
    const blocked = stringField(body.promptFeedback, 'blockReason')
    if (blocked !== undefined)
      return { kind: 'terminal', terminal: { reason: 'content_filter', raw: blocked } }
    return { kind: 'meta' }
  }
  const finish = stringField(candidate, 'finishReason')
  const terminal: TerminalInfo | undefined =
    finish === undefined ? undefined : { reason: mapReason(reasons, finish), raw: finish }
  const output = partsVerdict(field(field(candidate, 'content'), 'parts'))
  if (output !== undefined) return terminal === undefined ? output : { ...output, terminal }
  return terminal === undefined ? { kind: 'meta' } : { kind: 'terminal', terminal }
}

function geminiErrorBody(error: RenderableError): string {
  const { type, message } = renderable(error)
  const status = typeof error.status === 'number' ? error.status : 500
  return JSON.stringify({ error: { code: status, message, status: type } })
}

function chunk(state: RenderState | undefined, candidate: Record<string, unknown>): string {
  const first = state?.firstData === undefined ? undefined : parseData(state.firstData)
  const modelVersion = stringField(first, 'modelVersion')
  const responseId = stringField(first, 'responseId')
  return sseFrameText(
    JSON.stringify({
      candidates: [{ ...candidate, index: 0 }],
      ...(modelVersion === undefined ? {} : { modelVersion }),
      ...(responseId === undefined ? {} : { responseId }),
    }),
  )
}

/**
 * The Gemini `streamGenerateContent` (`alt=sse`) adapter.
 *
 * - Parts with `thought: true` are reasoning, other text parts are text, `functionCall`,
 *   `executableCode` and `toolCall` parts are tool output, and any other part with content
 *   (`codeExecutionResult`, `toolResponse`, `inlineData`, a kind it does not know) is output
 *   (guarantee 27); a chunk with parts and a `finishReason` is output and terminal.
 * - `finishReason` `STOP` → stop, `MAX_TOKENS` → length, `SAFETY`/`RECITATION`/… →
 *   content_filter; a `promptFeedback.blockReason` with no candidates is terminal.
 * - A frame holding an `error` object is an error; `UNAVAILABLE`, `RESOURCE_EXHAUSTED`,
 *   `INTERNAL` and 5xx codes are retryable.
 *
 * Rendered error: a frame holding an `error` object. Rendered stop: a chunk with
 * `finishReason: "STOP"`.
 *
 * @group Protocols
 */
export const geminiGenerateContent: StreamAdapter = Object.freeze({
  name: 'gemini',
  inspect(frame: SseFrame): FrameVerdict {
    const data = frame.data
    if (data === undefined) return inspectWithoutData(frame, geminiError)
    const body = parseData(data)
    if (body === undefined)
      return malformedFrame(`a Gemini data frame is not a JSON object: ${data}`)
    return withUsage(inspectResponse(body), geminiUsage(body.usageMetadata))
  },
  quickOutput(frame: SseFrame): boolean {
    const raw = frame.raw
    return (
      startsWith(raw, dataObject) &&
      endsWithObject(raw) &&
      includes(raw, candidatesKey) &&
      !includes(raw, finishKey) &&
      !includes(raw, errorKey) &&
      !includes(raw, blockKey)
    )
  },
  renderError(error: RenderableError): Uint8Array {
    return encode(sseFrameText(geminiErrorBody(error)))
  },
  renderErrorBody: geminiErrorBody,
  nonStreamingRequest(request: UpstreamRequest): UpstreamRequest {
    if (request.url === undefined) return request
    const url = new URL(request.url)
    url.pathname = url.pathname.replace(/:streamGenerateContent$/, ':generateContent')
    url.searchParams.delete('alt')
    return { url: url.toString(), body: request.body }
  },
  credentialHeader: (secret: string): readonly [string, string] => ['x-goog-api-key', secret],
  // Both methods: a plain `:generateContent` call goes through the same engine as a stream.
  matchesUrl: (url: URL): boolean => /:(?:stream)?generateContent$/i.test(url.pathname),
  // Gemini streams by method, not by a body flag.
  isStreamingRequest: (url: URL): boolean => url.pathname.endsWith(':streamGenerateContent'),
  fitOutputBudget: fitGeminiBudget,
  // A complete answer is one GenerateContentResponse: one frame carries it whole.
  renderFromMessage: (message: unknown): Uint8Array =>
    encode(sseFrameText(JSON.stringify(message))),
  usageOf: (message: unknown) => geminiUsage(field(message, 'usageMetadata')),
  renderStop(state: RenderState): Uint8Array {
    return encode(
      chunk(state, { content: { parts: [{ text: '' }], role: 'model' }, finishReason: 'STOP' }),
    )
  },
  renderReasoningAsText(state: RenderState): Uint8Array {
    return encode(
      chunk(state, { content: { parts: [{ text: state.reasoningText }], role: 'model' } }),
    )
  },
})
