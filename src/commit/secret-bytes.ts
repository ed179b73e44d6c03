/**
 * Finds a request's secrets in bytes without decoding them: the pump asks it of every chunk
 * it writes, and decodes and redacts only a chunk that holds one (almost never).
 *
 * @module
 */

import { escapedPattern, formsOf, minRedactedLength } from '../protocols/sanitize.js'
import { includesBytes, indexOfByte } from '../sse/index-of.js'

const encoder = new TextEncoder()
const decoder = new TextDecoder()
const backslash = 0x5c

/** The short JSON escapes a secret's characters may take, besides `\u`. */
const shortEscapes = new Map([
  ['"', '\\"'],
  ['\\', '\\\\'],
  ['/', '\\/'],
  ['\b', '\\b'],
  ['\f', '\\f'],
  ['\n', '\\n'],
  ['\r', '\\r'],
  ['\t', '\\t'],
])

/**
 * The byte forms (as they are, and JSON-escaped) of a request's secrets, and any other JSON
 * escaping of them (`\/`, `\u003d`, mixed). The list is the request's own and only grows (a
 * continuation's key joins it): new entries are encoded when first seen.
 */
export class SecretBytes {
  readonly #forms: Uint8Array[] = []
  /** The secrets long enough to redact. */
  readonly #long: string[] = []
  /** What a chunk holds when it holds an escaped form: `\u`, or a short escape a secret needs. */
  readonly #escapes: Uint8Array[] = [encoder.encode('\\u')]
  #encoded = 0

  constructor(readonly secrets: readonly string[]) {}

  /** Whether there is any secret to look for. */
  get any(): boolean {
    return this.secrets.length > 0
  }

  /** Whether `bytes` hold one of the secrets, in any form a JSON parser reads back into it. */
  in(bytes: Uint8Array): boolean {
    const { secrets } = this
    for (; this.#encoded < secrets.length; this.#encoded++) {
      const secret = secrets[this.#encoded] as string
      // Shorter secrets are not redacted (redactValues): looking for them would only copy.
      if (secret.length < minRedactedLength) continue
      this.#long.push(secret)
      for (const form of formsOf(secret)) this.#forms.push(encoder.encode(form))
      for (const char of new Set(secret)) {
        const shortForm = shortEscapes.get(char)
        if (shortForm !== undefined) this.#escapes.push(encoder.encode(shortForm))
      }
    }
    for (const form of this.#forms) if (includesBytes(bytes, form)) return true
    // Any other form holds an escape: only then is the chunk decoded and matched.
    if (
      this.#long.length === 0 ||
      indexOfByte(bytes, backslash) < 0 ||
      !this.#escapes.some((form) => includesBytes(bytes, form))
    )
      return false
    const text = decoder.decode(bytes)
    return this.#long.some((secret) => text.search(escapedPattern(secret)) >= 0)
  }
}
