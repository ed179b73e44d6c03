/**
 * Finds a request's secrets in bytes without decoding them: the pump asks it of every chunk
 * it writes, and decodes and redacts only a chunk that holds one (almost never).
 *
 * @module
 */

import { formsOf, minRedactedLength } from '../protocols/sanitize.js'
import { includesBytes } from '../sse/index-of.js'

const encoder = new TextEncoder()

/**
 * The byte forms (as they are, and JSON-escaped) of a request's secrets. The list is the
 * request's own and only grows (a continuation's key joins it): new entries are encoded when
 * first seen.
 */
export class SecretBytes {
  readonly #forms: Uint8Array[] = []
  #encoded = 0

  constructor(readonly secrets: readonly string[]) {}

  /** Whether there is any secret to look for. */
  get any(): boolean {
    return this.secrets.length > 0
  }

  /** Whether `bytes` hold one of the secrets. */
  in(bytes: Uint8Array): boolean {
    const { secrets } = this
    for (; this.#encoded < secrets.length; this.#encoded++) {
      const secret = secrets[this.#encoded] as string
      // Shorter secrets are not redacted (redactValues): looking for them would only copy.
      if (secret.length < minRedactedLength) continue
      for (const form of formsOf(secret)) this.#forms.push(encoder.encode(form))
    }
    for (const form of this.#forms) if (includesBytes(bytes, form)) return true
    return false
  }
}
