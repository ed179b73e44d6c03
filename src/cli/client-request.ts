/**
 * The streaming request a chaos client sends, per protocol. The scenario and request id ride
 * in the last user message's text, which every gateway forwards.
 *
 * @module
 */

import { anthropicMessages } from '../protocols/anthropic-messages.js'
import { geminiGenerateContent } from '../protocols/gemini.js'
import { openaiChat } from '../protocols/openai-chat.js'
import { openaiResponses } from '../protocols/openai-responses.js'
import type { StreamAdapter } from '../protocols/types.js'
import { type ChaosMarker, chaosMarker } from '../testing/chaos-marker.js'

/** The protocols the chaos client speaks. */
export const chaosProtocols = [
  'openai-chat',
  'openai-responses',
  'anthropic-messages',
  'gemini',
] as const

/** One of {@link chaosProtocols}. */
export type ChaosProtocol = (typeof chaosProtocols)[number]

/** The adapter that reads each protocol's stream. */
export const protocolAdapters: Readonly<Record<ChaosProtocol, StreamAdapter>> = {
  'openai-chat': openaiChat,
  'openai-responses': openaiResponses,
  'anthropic-messages': anthropicMessages,
  gemini: geminiGenerateContent,
}

/** A request ready for `fetch`. */
export interface ClientRequest {
  readonly url: string
  readonly init: { method: 'POST'; headers: Record<string, string>; body: string }
}

// A stand-in credential: gateways that check for one find it; it opens nothing.
const standIn = 'sk-chaos-not-a-real-key'

/**
 * Builds the streaming request. `target` is the base URL an SDK would take: OpenAI's
 * (`…/v1`, then `/chat/completions` or `/responses`), Anthropic's (`/v1/messages` appended) or
 * Gemini's (`/v1beta/models/…:streamGenerateContent?alt=sse` appended).
 */
export function buildClientRequest(
  protocol: ChaosProtocol,
  target: string,
  marker: ChaosMarker,
  extraHeaders: Readonly<Record<string, string>> = {},
  where: { readonly model?: string | undefined; readonly path?: string | undefined } = {},
): ClientRequest {
  const base = target.replace(/\/+$/, '')
  const prompt = `Say the pangram. ${chaosMarker(marker)}`
  const model = where.model ?? 'chaos-model'
  // A gateway with its own routes: the endpoint path replaces the protocol's usual one.
  const at = (usual: string) => (where.path === undefined ? usual : `${base}${where.path}`)
  const json = { 'content-type': 'application/json', accept: 'text/event-stream' }
  const make = (url: string, headers: Record<string, string>, body: unknown): ClientRequest => ({
    url,
    init: {
      method: 'POST',
      headers: { ...json, ...headers, ...extraHeaders },
      body: JSON.stringify(body),
    },
  })
  const bearer = { authorization: `Bearer ${standIn}` }
  switch (protocol) {
    case 'openai-chat':
      return make(at(`${base}/chat/completions`), bearer, {
        model,
        stream: true,
        messages: [{ role: 'user', content: prompt }],
      })
    case 'openai-responses':
      return make(at(`${base}/responses`), bearer, {
        model,
        stream: true,
        input: [{ role: 'user', content: prompt }],
      })
    case 'anthropic-messages':
      return make(
        at(`${base}/v1/messages`),
        { 'x-api-key': standIn, 'anthropic-version': '2023-06-01' },
        { model, max_tokens: 256, stream: true, messages: [{ role: 'user', content: prompt }] },
      )
    case 'gemini':
      return make(
        at(`${base}/v1beta/models/${model}:streamGenerateContent?alt=sse`),
        { 'x-goog-api-key': standIn },
        { contents: [{ role: 'user', parts: [{ text: prompt }] }] },
      )
  }
}
