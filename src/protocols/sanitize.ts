/**
 * Makes upstream error text safe to show a client or write to a log: HTML pages reduced to
 * their title, control characters and undecodable bytes dropped, binary bodies withheld,
 * whitespace folded, length bounded, credentials redacted.
 *
 * @module
 */

/**
 * Longest message the library writes, in characters.
 *
 * @group Redaction
 */
export const maxMessageLength = 500

// A key may follow a letter-less joint (`req_sk-…`, `chatcmpl-AIza…`), never a letter or digit
// (`task-…` is a word). Values stop at a backslash: inside a JSON string it starts an escape,
// and redacting across it would break the JSON an error frame carries.
const secretPatterns: readonly RegExp[] = [
  // Provider API keys: OpenAI/Anthropic style `sk-...` (`sk-proj-...`, `sk-ant-...`), Google `AIza...`.
  /(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{8,}/g,
  /(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{20,}/g,
  // Bearer tokens and key-like query parameters.
  /\b(Bearer[ \t]+)[A-Za-z0-9._~+/=-]{8,}/gi,
  /([?&](?:key|api[_-]?key|token|access_token)=)[^&\s"'\\]+/gi,
  /("?(?:api[_-]?key|x-api-key|authorization|x-goog-api-key)"?\s*[:=]\s*"?)[^"\s,}\\]{8,}/gi,
]

/**
 * Replaces anything that looks like a credential with `[redacted]`.
 *
 * @group Redaction
 */
export function redactSecrets(text: string): string {
  let out = text
  for (const pattern of secretPatterns) {
    out = out.replace(pattern, (match, prefix: unknown) =>
      typeof prefix === 'string' && match.startsWith(prefix) ? `${prefix}[redacted]` : '[redacted]',
    )
  }
  return out
}

/** The shortest secret redacted by value: a shorter one would blank out ordinary words. */
export const minRedactedLength = 6

/** A cut message may end in the first characters of a secret: this many or more are redacted. */
const minRedactedPrefix = 4

/** How a secret may appear in a body: as it is, and escaped inside a JSON string. */
export function formsOf(secret: string): readonly string[] {
  const json = JSON.stringify(secret).slice(1, -1)
  return json === secret ? [secret] : [secret, json]
}

/** The short JSON escapes (the pattern of what follows the backslash), by their character. */
const shortEscapes: Readonly<Record<string, string>> = {
  '"': '"',
  '\\': '\\\\',
  '/': '/',
  '\b': 'b',
  '\f': 'f',
  '\n': 'n',
  '\r': 'r',
  '\t': 't',
}

/** One UTF-16 unit in any form a JSON string may hold it: itself, `\uXXXX` (any case), `\/`… */
function unitPattern(char: string): string {
  const hex = [...char.charCodeAt(0).toString(16).padStart(4, '0')]
    .map((digit) => (digit >= 'a' ? `[${digit}${digit.toUpperCase()}]` : digit))
    .join('')
  const short = shortEscapes[char]
  const literal = /[\\^$.*+?()[\]{}|/-]/.test(char) ? `\\${char}` : char
  return `(?:${literal}|\\\\(?:u${hex}${short === undefined ? '' : `|${short}`}))`
}

/** Patterns of recent secrets: a pool's keys come back request after request. */
const patterns = new Map<string, RegExp>()

/**
 * Every way `secret` may be written in text or inside a JSON string: each character as it is
 * or in any JSON escaping (`\/`, `\u003d`, `\u003D`, a surrogate pair's halves…), mixed
 * freely, as a client's JSON parser reads them all back into the secret. Global: for
 * `replace`; test it with `search`.
 */
export function escapedPattern(secret: string): RegExp {
  let pattern = patterns.get(secret)
  if (pattern === undefined) {
    if (patterns.size >= 256) patterns.clear()
    let source = ''
    for (let i = 0; i < secret.length; i++) source += unitPattern(secret[i] as string)
    pattern = new RegExp(source, 'g')
    patterns.set(secret, pattern)
  }
  return pattern
}

/**
 * Replaces every occurrence of each of `secrets` (the exact values the library put on an
 * attempt: leased keys, a caller's credential), as it is or in any JSON escaping (`\/`,
 * `\u003d`, `\u003D`, any `\uXXXX` of any character, mixed), with `[redacted]`,
 * and a message cut at its bound (`…`) that ends in the start of one. Secrets shorter than
 * 6 characters are left alone.
 *
 * @example
 * redactValues('bad key gsk_live_0123456789', ['gsk_live_0123456789']) // 'bad key [redacted]'
 *
 * @group Redaction
 */
export function redactValues(text: string, secrets: readonly string[]): string {
  let out = text
  for (const secret of secrets) {
    if (secret.length < minRedactedLength) continue
    if (out.includes(secret)) out = out.split(secret).join('[redacted]')
    // Any other form holds an escape.
    if (out.includes('\\')) out = out.replace(escapedPattern(secret), '[redacted]')
    if (out.endsWith('…')) out = redactCutTail(out, secret)
  }
  return out
}

/**
 * Text as it may leave the library: every one of `secrets` redacted by value
 * ({@link redactValues}), then anything shaped like a credential ({@link redactSecrets}).
 * Error text, forwarded header values and an answer's id and model all go through it.
 */
export function redactText(text: string, secrets: readonly string[]): string {
  return redactSecrets(redactValues(text, secrets))
}

/** A message cut inside a secret: its tail before the ellipsis is the secret's start. */
function redactCutTail(text: string, secret: string): string {
  const body = text.slice(0, -1)
  for (
    let length = Math.min(secret.length - 1, body.length);
    length >= minRedactedPrefix;
    length--
  ) {
    if (body.endsWith(secret.slice(0, length))) return `${body.slice(0, -length)}[redacted]…`
  }
  return text
}

function looksLikeHtml(text: string): boolean {
  return /<(?:!doctype|html|head|body|title)\b/i.test(text)
}

function htmlTitle(text: string): string | undefined {
  const match = /<title[^>]*>([\s\S]*?)<\/title>/i.exec(text)
  return match?.[1]?.trim() || undefined
}

// Controls (C0, DEL, C1), lone surrogates, U+FFFD from undecodable bytes, and bidi overrides
// (they make a log line read differently from what it holds). Whitespace controls are folded
// to spaces before this applies.
const unprintable = /[\p{Cc}\p{Cs}\uFFFD\u202A-\u202E\u2066-\u2069]/gu
const whitespace = /[\s\u0085]+/g

/** What stands in for a body that is mostly bytes no reader can use. */
const binaryNote = '[binary data omitted]'

/**
 * Whether text is mostly undecodable bytes or controls (a gzip or protobuf body read as
 * UTF-8): then even its printable fragments are noise, and only what came before is kept.
 */
function binaryStart(text: string): number | undefined {
  const matches = text.match(unprintable)
  if (matches === null || matches.length < 4 || matches.length * 10 < text.length) return undefined
  return text.search(unprintable)
}

/**
 * Sanitises an upstream message: an HTML page becomes its `<title>` (or its text without
 * tags); control characters, U+FFFD and bidi overrides are dropped (a mostly binary body is
 * replaced by `[binary data omitted]`); whitespace is folded to single spaces; the result is
 * redacted and bounded to {@link maxMessageLength} characters.
 *
 * @example
 * sanitizeMessage('<html><title>502 Bad Gateway</title>…</html>') // '502 Bad Gateway'
 * sanitizeMessage('bad\u0000 request\n\n  sk-abcdefghijkl') // 'bad request [redacted]'
 *
 * @group Redaction
 */
export function sanitizeMessage(message: string): string {
  // Fold whitespace first, so line breaks never count as binary and `<title>` spans lines.
  let text = message.replace(whitespace, ' ')
  const binaryAt = binaryStart(text)
  if (binaryAt !== undefined) text = `${text.slice(0, binaryAt)} ${binaryNote}`
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
  // Drop controls before redacting: a NUL inside a key must not hide it from the patterns.
  text = text.replace(unprintable, '')
  text = redactSecrets(text.replace(whitespace, ' ').trim())
  if (text.length > maxMessageLength) {
    let end = maxMessageLength - 1
    // Never cut a surrogate pair in half.
    if (/[\uD800-\uDBFF]/.test(text.charAt(end - 1))) end--
    text = `${text.slice(0, end)}…`
  }
  return text || 'upstream error'
}
