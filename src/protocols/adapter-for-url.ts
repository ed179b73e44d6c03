/**
 * Picks an adapter for a request URL by asking each adapter's `matchesUrl`.
 *
 * @module
 */

import { anthropicMessages } from './anthropic-messages.js'
import { geminiGenerateContent } from './gemini.js'
import { openaiChat } from './openai-chat.js'
import { openaiResponses } from './openai-responses.js'
import type { StreamAdapter } from './types.js'

/** The four shipped adapters, in the order {@link adapterForUrl} asks them. */
const shippedAdapters: readonly StreamAdapter[] = Object.freeze([
  openaiChat,
  openaiResponses,
  anthropicMessages,
  geminiGenerateContent,
])

/**
 * The first adapter whose `matchesUrl` accepts the URL, or `undefined`. By default the
 * shipped adapters are asked (`/chat/completions`, `/responses`, `/messages`,
 * `:streamGenerateContent` and `:generateContent`); pass your own list to include custom adapters. An adapter
 * without `matchesUrl` is never picked.
 *
 * @example
 * adapterForUrl('https://api.anthropic.com/v1/messages') // anthropicMessages
 * adapterForUrl(url, [myAdapter, ...]) // a custom adapter first
 *
 * @group Protocols
 */
export function adapterForUrl(
  url: string | URL,
  adapters: readonly StreamAdapter[] = shippedAdapters,
): StreamAdapter | undefined {
  const parsed = typeof url === 'string' ? new URL(url) : url
  return adapters.find((adapter) => adapter.matchesUrl?.(parsed) === true)
}

/** A shipped adapter by its `name`, for APIs that still take a protocol name. */
export function shippedAdapterNamed(name: string): StreamAdapter | undefined {
  return shippedAdapters.find((adapter) => adapter.name === name)
}
