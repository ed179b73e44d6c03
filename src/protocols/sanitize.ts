/**
 * Makes upstream error text safe to show a client or write to a log: HTML pages reduced to
 * their title, whitespace folded, length bounded, credentials redacted.
 *
 * @module
 */

/** Longest message the library writes, in characters. */
export const maxMessageLength = 500

const secretPatterns: readonly RegExp[] = [
  // Provider API keys: OpenAI/Anthropic style `sk-…`, Google `AIza…`.
  /\bsk-[A-Za-z0-9_-]{8,}/g,
  /\bAIza[0-9A-Za-z_-]{20,}/g,
  // Bearer tokens and key-like query parameters.
  /\b(Bearer\s+)[A-Za-z0-9._~+/=-]{8,}/gi,
  /([?&](?:key|api[_-]?key|token|access_token)=)[^&\s"']+/gi,
  /("?(?:api[_-]?key|x-api-key|authorization|x-goog-api-key)"?\s*[:=]\s*"?)[^"\s,}]{8,}/gi,
]

/** Replaces anything that looks like a credential with `[redacted]`. */
export function redactSecrets(text: string): string {
  let out = text
  for (const pattern of secretPatterns) {
    out = out.replace(pattern, (match, prefix: unknown) =>
      typeof prefix === 'string' && match.startsWith(prefix) ? `${prefix}[redacted]` : '[redacted]',
    )
  }
  return out
}

function looksLikeHtml(text: string): boolean {
  return /<(?:!doctype|html|head|body|title)\b/i.test(text)
}

function htmlTitle(text: string): string | undefined {
  const match = /<title[^>]*>([\s\S]*?)<\/title>/i.exec(text)
  return match?.[1]?.trim() || undefined
}

/**
 * Sanitises an upstream message: an HTML page becomes its `<title>` (or its text without
 * tags), whitespace is folded, the result is redacted and bounded to
 * {@link maxMessageLength} characters.
 */
export function sanitizeMessage(message: string): string {
  let text = message
  if (looksLikeHtml(text)) {
    // Keep what came before an embedded page ("upstream said: <html>…"), then the page's title.
    const start = text.search(/<(?:!doctype|html)\b/i)
    const before = start > 0 ? text.slice(0, start) : ''
    const page = start > 0 ? text.slice(start) : text
    const summary =
      htmlTitle(page) ??
      page.replace(/<(script|style)[\s\S]*?<\/\1>/gi, ' ').replace(/<[^>]*>/g, ' ')
    text = `${before}${summary}`
  }
  text = redactSecrets(text.replace(/\s+/g, ' ').trim())
  if (text.length > maxMessageLength) text = `${text.slice(0, maxMessageLength - 1)}…`
  return text || 'upstream error'
}
