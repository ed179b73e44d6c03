/**
 * Anthropic Messages clients served from an OpenAI Chat Completions upstream: a gateway that
 * translates protocols. The relay peeks and classifies the *upstream's* frames (`adapter:
 * openaiChat`), retries before the first output, and writes the client's stream through
 * `downstream: { adapter: anthropicMessages, transform }`: the translator turns each OpenAI
 * chunk into Anthropic events, and every frame the library writes itself (an honest error
 * after a cut, promoted reasoning, the error body before content) is rendered in Anthropic's
 * shape, continuing the blocks the client already got.
 *
 * The upstream credential is the gateway's own (`UPSTREAM_API_KEY`), so no `pool` is passed.
 *
 * Run it:
 *   UPSTREAM_OPENAI_URL=https://api.openai.com/v1 UPSTREAM_API_KEY=sk-... UPSTREAM_MODEL=gpt-4o-mini \
 *   PORT=8788 node --import tsx examples/anthropic-over-openai-gateway.ts
 */

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { pathToFileURL } from 'node:url'
import {
  anthropicMessages,
  createRelay,
  type DownstreamOptions,
  type DownstreamTransformContext,
  fetchAttempt,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  type SseFrame,
} from '../src/index.js'
import { nodeSink, readNodeRequest } from '../src/node.js'

/** What the translator remembers between chunks of one answer. */
interface TranslationState {
  started: boolean
  finished: boolean
  nextIndex: number
  /** The open block: its index and kind (`text`, `thinking`, or a tool call's own index). */
  open: { index: number; kind: string } | undefined
  toolBlocks: Map<number, number>
}

const stopReasons: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'refusal',
}

const event = (name: string, data: Record<string, unknown>): string =>
  `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`

function newTranslation(): TranslationState {
  return { started: false, finished: false, nextIndex: 0, open: undefined, toolBlocks: new Map() }
}

function stateOf(context: DownstreamTransformContext): TranslationState {
  const bag = context.state as { translation?: TranslationState }
  bag.translation ??= newTranslation()
  return bag.translation
}

/** Closes the open block when the next delta belongs to another one, and opens that one. */
function enterBlock(
  state: TranslationState,
  kind: string,
  start: Record<string, unknown>,
): { out: string; index: number } {
  if (state.open?.kind === kind) return { out: '', index: state.open.index }
  let out = ''
  if (state.open !== undefined) out += event('content_block_stop', { index: state.open.index })
  const index = state.nextIndex++
  state.open = { index, kind }
  out += event('content_block_start', { index, content_block: start })
  return { out, index }
}

interface ChatDelta {
  content?: string | null
  reasoning_content?: string | null
  tool_calls?: { index: number; id?: string; function?: { name?: string; arguments?: string } }[]
}

function translateDelta(state: TranslationState, delta: ChatDelta): string {
  let out = ''
  if (typeof delta.reasoning_content === 'string' && delta.reasoning_content !== '') {
    const block = enterBlock(state, 'thinking', { type: 'thinking', thinking: '' })
    out += block.out
    out += event('content_block_delta', {
      index: block.index,
      delta: { type: 'thinking_delta', thinking: delta.reasoning_content },
    })
  }
  if (typeof delta.content === 'string' && delta.content !== '') {
    const block = enterBlock(state, 'text', { type: 'text', text: '' })
    out += block.out
    out += event('content_block_delta', {
      index: block.index,
      delta: { type: 'text_delta', text: delta.content },
    })
  }
  for (const call of delta.tool_calls ?? []) {
    const kind = `tool-${call.index}`
    const block = enterBlock(state, kind, {
      type: 'tool_use',
      id: call.id ?? `toolu_${call.index}`,
      name: call.function?.name ?? '',
      input: {},
    })
    out += block.out
    const json = call.function?.arguments ?? ''
    if (json !== '') {
      out += event('content_block_delta', {
        index: block.index,
        delta: { type: 'input_json_delta', partial_json: json },
      })
    }
  }
  return out
}

/**
 * Translates one OpenAI Chat chunk's `data` into Anthropic Messages events (`''`: nothing to
 * send). It closes the message at `finish_reason`, so a cut after it still leaves the client
 * whole.
 */
function translateChunk(state: TranslationState, data: string): string {
  if (state.finished || data === '[DONE]') return ''
  const chunk = JSON.parse(data) as {
    id?: string
    model?: string
    error?: { type?: string; message?: string }
    choices?: { delta?: ChatDelta; finish_reason?: string | null }[]
    usage?: { prompt_tokens?: number; completion_tokens?: number }
  }
  if (chunk.error !== undefined) {
    state.finished = true
    const message = chunk.error.message ?? 'The upstream reported an error'
    return `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'api_error', message } })}\n\n`
  }
  let out = ''
  if (!state.started) {
    state.started = true
    out += event('message_start', {
      message: {
        id: `msg_${chunk.id ?? 'gateway'}`,
        type: 'message',
        role: 'assistant',
        content: [],
        model: chunk.model ?? 'unknown',
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: chunk.usage?.prompt_tokens ?? 0, output_tokens: 0 },
      },
    })
  }
  const choice = chunk.choices?.[0]
  if (choice?.delta !== undefined) out += translateDelta(state, choice.delta)
  const finish = choice?.finish_reason
  if (typeof finish === 'string') {
    state.finished = true
    if (state.open !== undefined) out += event('content_block_stop', { index: state.open.index })
    state.open = undefined
    out += event('message_delta', {
      delta: { stop_reason: stopReasons[finish] ?? 'end_turn', stop_sequence: null },
      usage: { output_tokens: chunk.usage?.completion_tokens ?? 0 },
    })
    out += event('message_stop', {})
  }
  return out
}

/**
 * The per-frame form (`downstream.transform`): one OpenAI Chat frame in, Anthropic events out
 * (`null`: nothing to send).
 */
export function openaiChunkToAnthropic(
  frame: SseFrame,
  context: DownstreamTransformContext,
): string | null {
  const data = frame.data
  if (data === undefined) return null
  const out = translateChunk(stateOf(context), data)
  return out === '' ? null : out
}

/**
 * The whole-stream form (`downstream.translateFrames`), written the way gateways write
 * translators: iterate the frames, yield the client's events. Nothing here cares about cuts:
 * when the upstream fails after commit, iterating `frames` throws, this stops, and the relay
 * writes the honest ending in Anthropic's protocol.
 */
export async function* openaiToAnthropic(frames: AsyncIterable<SseFrame>): AsyncGenerator<string> {
  const state = newTranslation()
  for await (const frame of frames) {
    if (frame.data === undefined) continue
    const out = translateChunk(state, frame.data)
    if (out !== '') yield out
  }
}

/** The `data` of one SSE event's text (its `data:` lines joined), or `undefined`. */
function dataOf(text: string): string | undefined {
  const lines = text.split(/\r?\n/).filter((line) => line.startsWith('data:'))
  if (lines.length === 0) return undefined
  return lines.map((line) => line.slice(line.startsWith('data: ') ? 6 : 5)).join('\n')
}

/**
 * The byte-level form (`downstream.translateStream`): a `TransformStream` from OpenAI Chat SSE
 * bytes to Anthropic SSE text, splitting events on blank lines itself. A failed input errors
 * it, so it never writes an ending of its own for a cut stream.
 */
export function openaiToAnthropicStream(): TransformStream<Uint8Array, string> {
  const decoder = new TextDecoder()
  const state = newTranslation()
  let buffered = ''
  return new TransformStream<Uint8Array, string>({
    transform(bytes, controller) {
      buffered += decoder.decode(bytes, { stream: true })
      for (
        let end = buffered.search(/\r?\n\r?\n/);
        end !== -1;
        end = buffered.search(/\r?\n\r?\n/)
      ) {
        const text = buffered.slice(0, end)
        buffered = buffered.slice(end).replace(/^\r?\n\r?\n/, '')
        const data = dataOf(text)
        const out = data === undefined ? '' : translateChunk(state, data)
        if (out !== '') controller.enqueue(out)
      }
    },
  })
}

/**
 * The `Response → Response` form (`downstream.translateResponse`), the shape of response
 * transformers in gateways such as `@musistudio/llms`.
 */
export function openaiToAnthropicResponse(response: Response): Response {
  const body = response.body
    ?.pipeThrough(openaiToAnthropicStream())
    .pipeThrough(new TextEncoderStream())
  return new Response(body ?? null, { headers: { 'content-type': 'text/event-stream' } })
}

interface AnthropicRequest {
  model?: string
  max_tokens?: number
  system?: string | { type: string; text?: string }[]
  messages?: { role: string; content: string | { type: string; text?: string }[] }[]
  tools?: { name: string; description?: string; input_schema?: unknown }[]
}

const textOf = (content: string | { type: string; text?: string }[]): string =>
  typeof content === 'string' ? content : content.map((part) => part.text ?? '').join('')

/** The OpenAI Chat request for an Anthropic Messages one (text and tools; enough for a demo). */
export function anthropicToOpenaiRequest(
  body: AnthropicRequest,
  model: string,
): Record<string, unknown> {
  const messages: { role: string; content: string }[] = []
  if (body.system !== undefined) messages.push({ role: 'system', content: textOf(body.system) })
  for (const message of body.messages ?? []) {
    messages.push({ role: message.role, content: textOf(message.content) })
  }
  return {
    model,
    stream: true,
    stream_options: { include_usage: true },
    ...(body.max_tokens === undefined ? {} : { max_tokens: body.max_tokens }),
    messages,
    ...(body.tools === undefined
      ? {}
      : {
          tools: body.tools.map((tool) => ({
            type: 'function',
            function: {
              name: tool.name,
              description: tool.description ?? '',
              parameters: tool.input_schema ?? {},
            },
          })),
        }),
  }
}

export interface TranslatingGatewayConfig {
  /** e.g. `https://api.openai.com/v1`: `/chat/completions` is appended. */
  upstreamUrl: string
  /** The gateway's own upstream credential (caller-owned: no key pool). */
  upstreamApiKey: string
  /** The upstream model every request is sent to. */
  model: string
  policy?: RelayPolicy
  onOutcome?: (outcome: RelayOutcome) => void
  /**
   * The translator's form: `frames` (an async generator over the frames), `stream` (a
   * `TransformStream`), `response` (`Response → Response`) or `per-frame`.
   * @default 'frames'
   */
  translator?: TranslatorForm
  /** A per-frame translator to use instead (`translator: 'per-frame'`). @default openaiChunkToAnthropic */
  transform?: typeof openaiChunkToAnthropic
  /** @default 0 (an ephemeral port) */
  port?: number
}

/** The gateway's relay, built once: the upstream protocol, its credential and the policy. */
function relayFor(config: TranslatingGatewayConfig) {
  return createRelay({
    adapter: openaiChat,
    // The gateway's own credential, in the upstream protocol's header, on every attempt.
    attempt: fetchAttempt({ credential: config.upstreamApiKey }),
    policy: { ...config.policy, downstream: downstreamFor(config) },
  })
}

async function handle(
  config: TranslatingGatewayConfig,
  relay: ReturnType<typeof relayFor>,
  req: IncomingMessage,
  res: ServerResponse,
) {
  if (req.method !== 'POST' || req.url?.split('?')[0] !== '/v1/messages') {
    res.writeHead(404, { 'content-type': 'application/json' })
    res.end(
      JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: 'Not found' } }),
    )
    return
  }
  // The client speaks Anthropic: a bad body gets Anthropic's 400 here, and goes nowhere.
  const client = await readNodeRequest(req, res, { adapter: anthropicMessages })
  if (client === undefined) return
  const body = anthropicToOpenaiRequest(client as unknown as AnthropicRequest, config.model)
  const outcome = await relay({
    // nodeSink watches the client: when it leaves, the upstream attempt is cancelled.
    sink: nodeSink(res),
    request: { url: `${config.upstreamUrl}/chat/completions`, body },
  })
  config.onOutcome?.(outcome)
}

/** The translator forms this example ships, one translator core in each. */
export type TranslatorForm = 'frames' | 'stream' | 'response' | 'per-frame'

/** The client's side: Anthropic Messages, and the translator in the form asked for. */
export function anthropicDownstream(
  form: TranslatorForm,
  transform: typeof openaiChunkToAnthropic = openaiChunkToAnthropic,
): DownstreamOptions {
  const adapter = anthropicMessages
  switch (form) {
    case 'frames':
      return { adapter, translateFrames: openaiToAnthropic }
    case 'stream':
      return { adapter, translateStream: openaiToAnthropicStream }
    case 'response':
      return { adapter, translateResponse: openaiToAnthropicResponse }
    case 'per-frame':
      return { adapter, transform }
  }
}

function downstreamFor(config: TranslatingGatewayConfig): DownstreamOptions {
  const form = config.translator ?? (config.transform === undefined ? 'frames' : 'per-frame')
  return anthropicDownstream(form, config.transform)
}

/** Starts the translating gateway on 127.0.0.1. */
export async function startTranslatingGateway(
  config: TranslatingGatewayConfig,
): Promise<{ url: string; close(): Promise<void> }> {
  const relay = relayFor(config)
  const server = createServer((req, res) => {
    handle(config, relay, req, res).catch(() => res.destroy())
  })
  await new Promise<void>((resolve) => server.listen(config.port ?? 0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const gateway = await startTranslatingGateway({
    upstreamUrl: process.env.UPSTREAM_OPENAI_URL ?? 'https://api.openai.com/v1',
    upstreamApiKey: process.env.UPSTREAM_API_KEY ?? '',
    model: process.env.UPSTREAM_MODEL ?? 'gpt-4o-mini',
    port: Number(process.env.PORT ?? 8788),
  })
  console.log(`Anthropic Messages over OpenAI Chat on ${gateway.url}/v1/messages`)
}
