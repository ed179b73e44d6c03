import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { maxMessageLength, redactSecrets, sanitizeMessage } from '../../src/advanced.js'
import { runs } from '../support/runs.js'

const numRuns = runs(500)

// What the output must never hold: C0/C1 controls, DEL, U+FFFD, bidi overrides, lone surrogates.
const forbidden = /[\p{Cc}\p{Cs}\uFFFD\u202A-\u202E\u2066-\u2069]/u
const secretLike = [
  /\bsk-[A-Za-z0-9_-]{8,}/,
  /\bAIza[0-9A-Za-z_-]{20,}/,
  /\bBearer\s+[A-Za-z0-9._~+/=-]{8,}/i,
]

const hostile = fc.constantFrom(
  '\u0000',
  '\u0007',
  '\u001B[31m',
  '\u007F',
  '\u0085',
  '\u009B',
  '\uFFFD',
  '\u202E',
  '\uD800',
  '\uDC00',
  '\t',
  '\r\n',
  '\u2028',
  '   ',
  '<title>',
)
const secret = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9_-]{8,30}$/).map((s) => `sk-${s}`),
  fc.stringMatching(/^[A-Za-z0-9_-]{20,30}$/).map((s) => `AIza${s}`),
  fc.stringMatching(/^[A-Za-z0-9._~+/=-]{8,30}$/).map((s) => `Bearer ${s}`),
)
/** Any string, mixed with controls, undecodable bytes, whitespace runs and credentials. */
const message = fc
  .array(fc.oneof(fc.string({ unit: 'binary', maxLength: 40 }), hostile, secret), {
    maxLength: 40,
  })
  .map((parts) => parts.join(' '))

describe('sanitizeMessage', () => {
  it('output has no control characters or U+FFFD, no whitespace runs, a bounded length and no secret-looking token', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary' }), message), (input) => {
        const output = sanitizeMessage(input)
        expect(output).not.toMatch(forbidden)
        expect(output).not.toMatch(/\s{2,}/)
        expect(output).toBe(output.trim())
        expect(output.length).toBeGreaterThan(0)
        expect(output.length).toBeLessThanOrEqual(maxMessageLength)
        for (const pattern of secretLike) expect(output).not.toMatch(pattern)
      }),
      { numRuns },
    )
  })
})

describe('sanitizeMessage examples', () => {
  it('drops controls and undecodable bytes and folds whitespace', () => {
    expect(sanitizeMessage('bad\u0000 request\r\n\t\u0085 here\u001B[0m')).toBe(
      'bad request here[0m',
    )
    expect(sanitizeMessage('Fehler: ung\uFFFDltige Anfrage')).toBe('Fehler: ungltige Anfrage')
  })

  it('withholds a binary body instead of echoing its printable fragments', () => {
    const gzip = new Uint8Array(600)
    for (let i = 0; i < gzip.length; i++) gzip[i] = (i * 131 + 7) % 256
    gzip[0] = 0x1f
    gzip[1] = 0x8b
    const text = `upstream sent a body that is not SSE: ${new TextDecoder().decode(gzip)}`
    expect(sanitizeMessage(text)).toBe(
      'upstream sent a body that is not SSE: [binary data omitted]',
    )
  })

  it('finds a key split by a control character', () => {
    expect(sanitizeMessage('key sk-abcd\u0000efghijkl refused')).toBe('key [redacted] refused')
  })

  it('keeps non-Latin text and never cuts a surrogate pair when it truncates', () => {
    expect(sanitizeMessage('リクエストが不正です')).toBe('リクエストが不正です')
    const long = `${'a'.repeat(maxMessageLength - 2)}😀😀`
    const out = sanitizeMessage(long)
    expect(out.length).toBeLessThanOrEqual(maxMessageLength)
    expect(out).not.toMatch(forbidden)
    expect(out.endsWith('…')).toBe(true)
  })
})

describe('redactSecrets on an error frame', () => {
  const json = fc.oneof(
    fc.string({ maxLength: 20 }),
    secret,
    fc.constantFrom('\\', '"', '\\"', '?key=', '&api_key=', 'api_key: ', '"api_key":"', 'req_'),
  )
  it('keeps the JSON of an error frame valid and its secret-looking tokens gone, whatever the message quotes', () => {
    fc.assert(
      fc.property(fc.array(json, { maxLength: 8 }), (parts) => {
        const message = parts.join('')
        const frame = JSON.stringify({ error: { type: 'server_error', message } })
        const redacted = redactSecrets(frame)
        const parsed = JSON.parse(redacted) as { error: { type: string; message: string } }
        expect(parsed.error.type).toBe('server_error')
        for (const pattern of secretLike) expect(parsed.error.message).not.toMatch(pattern)
      }),
      { numRuns },
    )
  })

  it('finds a key after an underscore, and leaves a word ending in sk- alone', () => {
    expect(redactSecrets('req_sk-proj-abcdefghijkl id_AIza0123456789abcdefghijklmnop')).toBe(
      'req_[redacted] id_[redacted]',
    )
    expect(redactSecrets('task-abcdefghijkl desk-0123456789')).toBe(
      'task-abcdefghijkl desk-0123456789',
    )
  })
})
