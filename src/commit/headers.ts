/**
 * Which upstream response headers may be passed on to the client. An allowlist: by default
 * only the headers that identify the client's request (request ids, processing time) and say
 * when to try again. Upstream account identifiers (`openai-organization`, `openai-project`,
 * `anthropic-organization-id`) are never passed on by default, and per-key rate-limit
 * budgets only when asked. Hop-by-hop headers, framing, encoding, cookies and credentials never
 * pass, whatever the policy; every value that does pass is redacted (the request's secrets by
 * value, anything shaped like a key by shape).
 *
 * @module
 */

import { redactText } from '../protocols/sanitize.js'

/**
 * Never passed on, under any policy: they describe this connection or this body, set state,
 * or carry a credential (an upstream that echoes the key it was sent).
 */
const neverForwarded = new Set([
  'authorization',
  'x-api-key',
  'x-goog-api-key',
  'api-key',
  'cookie',
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'content-encoding',
  'content-type',
  'set-cookie',
  'set-cookie2',
  'alt-svc',
])

/**
 * Which upstream response headers reach the client.
 *
 * - an object: `allow` lists header names (case-insensitive) or patterns; `rateLimit: true`
 *   adds the per-key rate-limit families (`x-ratelimit-*`, `anthropic-ratelimit-*`);
 * - `'none'`: nothing from the upstream;
 * - a function: called with each header's lower-case name and its value; `true` passes it on.
 *
 * Under every policy, hop-by-hop headers (and those the upstream's `connection` header names),
 * framing, encoding, cookies and credential headers (`authorization`, `proxy-authorization`,
 * `x-api-key`, `x-goog-api-key`, `api-key`) are dropped, and the values that pass are redacted:
 * `x-request-id: req_<key>` goes out as `req_[redacted]`.
 *
 * @example { allow: [...forwardHeadersDefaults.allow, 'openai-model'], rateLimit: true }
 * @group Downstream
 */
export type ForwardHeadersPolicy =
  | 'none'
  | {
      /**
       * Header names or patterns to pass on. Replaces the default list: spread
       * `forwardHeadersDefaults.allow` to extend it.
       * @default forwardHeadersDefaults.allow
       */
      readonly allow?: readonly (string | RegExp)[]
      /**
       * Also pass on `x-ratelimit-*` and `anthropic-ratelimit-*`. They describe the one
       * upstream key that served this attempt, not the gateway: with several keys in a pool
       * they mislead a client's own backoff.
       * @default false
       */
      readonly rateLimit?: boolean
    }
  | ((name: string, value: string) => boolean)

/**
 * Defaults of {@link ForwardHeadersPolicy}.
 *
 * @group Downstream
 */
export const forwardHeadersDefaults: {
  readonly allow: readonly string[]
  readonly rateLimit: false
} = Object.freeze({
  allow: Object.freeze([
    // OpenAI's request id, and the name most proxies use.
    'x-request-id',
    // Anthropic's request id.
    'request-id',
    // How long the upstream worked on the request.
    'openai-processing-ms',
    // When to try again, on an answer the gateway passes on as it is.
    'retry-after',
    'retry-after-ms',
  ]),
  rateLimit: false,
})

/** The per-key rate-limit header families, added by `rateLimit: true`. */
const rateLimitFamilies: readonly RegExp[] = [/^x-ratelimit-/, /^anthropic-ratelimit-/]

const tokenPattern = /^[!#$%&'*+.^_`|~0-9a-z-]+$/

/** Decides per header name and value; built once per policy. */
export type HeaderFilter = (name: string, value: string) => boolean

/**
 * Checks a policy and turns it into one predicate, so a bad policy fails where it is given
 * (a gate's options, a relay's policy) rather than at the first upstream answer.
 */
export function headerFilter(
  policy: ForwardHeadersPolicy = forwardHeadersDefaults,
  option = 'forwardHeaders',
): HeaderFilter {
  if (policy === 'none') return () => false
  if (typeof policy === 'function') return policy
  if (typeof policy !== 'object' || policy === null) {
    throw new TypeError(
      `${option} must be 'none', a function or { allow, rateLimit }, got ${String(policy)}`,
    )
  }
  const allow = policy.allow ?? forwardHeadersDefaults.allow
  if (!Array.isArray(allow)) {
    throw new TypeError(`${option}.allow must be an array of header names or RegExps`)
  }
  const names = new Set<string>()
  const patterns: RegExp[] = []
  allow.forEach((entry: unknown, index) => {
    if (typeof entry === 'string' && tokenPattern.test(entry.toLowerCase())) {
      names.add(entry.toLowerCase())
    } else if (entry instanceof RegExp) {
      // Without `g` or `y`, `test()` keeps no state between headers.
      patterns.push(new RegExp(entry.source, entry.flags.replace(/[gy]/g, '')))
    } else {
      throw new TypeError(
        `${option}.allow[${index}] must be a header name or a RegExp, got ${JSON.stringify(entry) ?? String(entry)}`,
      )
    }
  })
  if (policy.rateLimit !== undefined && typeof policy.rateLimit !== 'boolean') {
    throw new TypeError(`${option}.rateLimit must be a boolean, got ${String(policy.rateLimit)}`)
  }
  if (policy.rateLimit ?? forwardHeadersDefaults.rateLimit) patterns.push(...rateLimitFamilies)
  return (name) => names.has(name) || patterns.some((pattern) => pattern.test(name))
}

/**
 * Applies a filter, after dropping what never passes (hop-by-hop, framing, cookies,
 * credentials), and redacts each value that passes: `secrets` by value, keys by shape. A
 * plain record of lower-case names: the gate builds its head in it.
 */
export function filterHeaderRecord(
  headers: Headers,
  filter: HeaderFilter,
  secrets: readonly string[] = [],
): Record<string, string> {
  // The headers the upstream's own `connection` header names (most answers have none, or
  // `keep-alive`, which is dropped anyway).
  const connection = headers.get('connection')
  const named =
    connection === null || connection === 'keep-alive'
      ? undefined
      : new Set(
          connection
            .split(',')
            .map((name) => name.trim().toLowerCase())
            .filter((name) => name !== ''),
        )
  const out: Record<string, string> = {}
  for (const [name, value] of headers) {
    if (neverForwarded.has(name) || named?.has(name) === true) continue
    if (filter(name, value)) out[name] = redactText(value, secrets)
  }
  return out
}

/** {@link filterHeaderRecord} as `Headers`. */
function filterHeaders(
  headers: Headers,
  filter: HeaderFilter,
  secrets: readonly string[] = [],
): Headers {
  return new Headers(filterHeaderRecord(headers, filter, secrets))
}

/**
 * The upstream headers to pass on to the client under `policy` (by default
 * {@link forwardHeadersDefaults}: request ids, processing time, `retry-after`). Hop-by-hop
 * headers (including those the upstream's own `connection` header names), framing, encoding,
 * cookies and credential headers are dropped under every policy; every value passed on is
 * redacted: each of `secrets` (the keys you sent) by value, anything shaped like a key by
 * shape. Throws a `TypeError` naming the field for a malformed policy.
 *
 * @example
 * forwardableHeaders(upstream.headers) // x-request-id yes, openai-organization no
 * forwardableHeaders(upstream.headers, { rateLimit: true }) // plus x-ratelimit-*
 * forwardableHeaders(upstream.headers, undefined, [key]) // x-request-id: req_[redacted]
 *
 * @group Downstream
 */
export function forwardableHeaders(
  headers: Headers,
  policy?: ForwardHeadersPolicy,
  secrets: readonly string[] = [],
): Headers {
  return filterHeaders(headers, headerFilter(policy), secrets)
}
