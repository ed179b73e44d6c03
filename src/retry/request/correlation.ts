/**
 * Where a correlation id may be sent: `x-client-request-id` is a header the providers' own
 * APIs document, and a strict proxy or another vendor's OpenAI-compatible host may refuse a
 * request that carries a header it does not know.
 *
 * @module
 */

/** The hosts of the providers' own APIs, which take `x-client-request-id`. */
const firstPartyHosts = new Set(['api.openai.com', 'api.anthropic.com'])

/**
 * Whether `url` is a provider's own API (`api.openai.com`, `api.anthropic.com`), the only
 * hosts `createResilientFetch` sends its per-attempt `x-client-request-id` to, as the
 * official clients do: a third-party OpenAI-compatible host or a strict proxy may reject a
 * header it does not know. A caller's own `x-client-request-id` is always kept. An attempt
 * function can ask the same before sending `AttemptContext.requestId`.
 *
 * @example
 * if (requestId !== undefined && isFirstPartyApi(upstreamUrl)) headers['x-client-request-id'] = requestId
 *
 * @group Fetch wrapper
 */
export function isFirstPartyApi(url: string | URL): boolean {
  try {
    const parsed = typeof url === 'string' ? new URL(url) : url
    return parsed.protocol === 'https:' && firstPartyHosts.has(parsed.hostname.toLowerCase())
  } catch {
    return false
  }
}
