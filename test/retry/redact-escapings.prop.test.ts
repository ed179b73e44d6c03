/**
 * A secret quoted with any JSON escaping: `\/` for `/` (PHP's default), `\u003d` for `=`
 * (Gson's), any `\uXXXX` form of any character in either case, the short escapes, and any mix
 * of them. A client's JSON parser turns each of them back into the secret, so redaction by
 * value must find every one: in text (`redactValues`), in the bytes the pump writes
 * (`SecretBytes`), and through the relay to the client.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { SecretBytes } from '../../src/commit/secret-bytes.js'
import { createMemoryKeyPool, openaiChat, type RelayPolicy, relay } from '../../src/index.js'
import { redactValues } from '../../src/protocols/sanitize.js'
import { createRecordingSink } from '../../src/testing/recording-sink.js'
import { runs } from '../support/runs.js'
import { scriptedUpstream } from '../support/upstream.js'

const shortEscapes: Record<string, string> = {
  '"': '\\"',
  '\\': '\\\\',
  '/': '\\/',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
}

/** `text` inside a JSON string, each UTF-16 unit written in a form chosen by `choices`. */
function escapeWith(text: string, choices: readonly number[]): string {
  let out = ''
  let i = 0
  for (const char of text) {
    const pick = choices[i++ % choices.length] ?? 0
    // A character outside the BMP: as it is (UTF-8 has no half of it), or both halves escaped.
    const units = [...Array(char.length).keys()].map((at) =>
      char.charCodeAt(at).toString(16).padStart(4, '0'),
    )
    const forms = [
      units.map((hex) => `\\u${hex}`).join(''),
      units.map((hex) => `\\u${hex.toUpperCase()}`).join(''),
    ]
    if (shortEscapes[char] !== undefined) forms.push(shortEscapes[char])
    if (char >= ' ' && char !== '"' && char !== '\\') forms.push(char)
    out += forms[pick % forms.length]
  }
  return out
}

/** What a client's JSON parser reads from every string in `text`. */
const parsed = (text: string) =>
  text.replace(/\\(u[0-9a-fA-F]{4}|.)/g, (_, code: string) =>
    code.length === 5
      ? String.fromCharCode(Number.parseInt(code.slice(1), 16))
      : (({ b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' } as Record<string, string>)[code] ?? code),
  )

// Keys of no known shape: printable ASCII with `/`, `=`, `+` and quotes likely, or any text.
const secrets = fc.oneof(
  fc
    .array(fc.constantFrom(...'abcXYZ0189/=+-_."\\'.split('')), { minLength: 8, maxLength: 40 })
    .map((chars) => chars.join('')),
  fc.string({ unit: 'binary', minLength: 8, maxLength: 24 }),
)
const choices = fc.array(fc.nat(5), { minLength: 1, maxLength: 12 })
const words = fc.string({ maxLength: 20 }).map((text) => JSON.stringify(text).slice(1, -1))

describe('redaction of every JSON escaping', () => {
  it('redactValues leaves no JSON escaping of a secret that a parser would turn back into it', () => {
    fc.assert(
      fc.property(secrets, choices, words, words, (secret, picks, before, after) => {
        fc.pre(!parsed(before + after).includes(secret))
        const text = `{"message":"${before}${escapeWith(secret, picks)}${after}"}`
        expect(parsed(text)).toContain(secret)
        const out = redactValues(text, [secret])
        expect(parsed(out)).not.toContain(secret)
        expect(new SecretBytes([secret]).in(new TextEncoder().encode(text))).toBe(true)
      }),
      { numRuns: runs(100) },
    )
  })

  it("the forms seen in the wild: PHP's \\/ and Gson's \\u003d", () => {
    const secret = 'tok/AbCdEf==+Zz9'
    for (const form of [
      'tok\\/AbCdEf==+Zz9',
      'tok/AbCdEf\\u003d\\u003d+Zz9',
      'tok\\/AbCdEf\\u003D=\\u002bZz9',
    ]) {
      expect(redactValues(`bad key ${form}`, [secret])).toBe('bad key [redacted]')
      expect(new SecretBytes([secret]).in(new TextEncoder().encode(`"${form}"`))).toBe(true)
    }
    // Text that holds none is left as it is, escapes and all.
    expect(redactValues('a \\u0041 b \\/ c', [secret])).toBe('a \\u0041 b \\/ c')
    expect(new SecretBytes([secret]).in(new TextEncoder().encode('a \\u0041 b \\/'))).toBe(false)
  })

  it('through the relay: a key echoed with any JSON escaping, in output or in an error frame, never reaches the client', async () => {
    const policy: RelayPolicy = { maxAttempts: 1 }
    const keySecrets = fc
      .array(fc.constantFrom(...'abcXYZ0189/=+-_'.split('')), { minLength: 12, maxLength: 40 })
      .map((chars) => chars.join(''))
    await fc.assert(
      fc.asyncProperty(keySecrets, choices, fc.boolean(), async (secret, picks, asError) => {
        const quoted = escapeWith(secret, picks)
        const content = `data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n`
        const echo = asError
          ? `data: {"error":{"type":"server_error","message":"key ${quoted} failed"}}\n\n`
          : `data: {"choices":[{"index":0,"delta":{"content":"your key is ${quoted}"},"finish_reason":null}]}\n\ndata: [DONE]\n\n`
        const upstream = scriptedUpstream([{ steps: [{ bytes: content }, { bytes: echo }] }])
        const sink = createRecordingSink()
        const outcome = await relay({
          sink,
          pool: createMemoryKeyPool([{ id: 'only', secret }]),
          adapter: openaiChat,
          attempt: upstream.attempt,
          policy,
        })
        expect(parsed(sink.text)).not.toContain(secret)
        expect(parsed(JSON.stringify(outcome))).not.toContain(secret)
      }),
      { numRuns: runs(60) },
    )
  })
})
