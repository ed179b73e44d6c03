/**
 * A `Response` without undici's per-response set-up: `nodeResponse` answers every `node:http`
 * attempt with one. Its headers are a plain record read from the message's raw name and value
 * pairs (`PlainHeaders`), and its body is the Node stream the frame reader takes as it is; a
 * web stream is made only when something asks for `body`. Both pass `instanceof Response` /
 * `instanceof Headers` and read as a `Response` and its `Headers` do (names lower-case and
 * sorted, repeated fields joined with `, `, `set-cookie` kept apart), so what an attempt
 * function returns and what the relay reads of it are the same as over `fetch`.
 *
 * @module
 */

import { iterableBody, streamOver } from './sources.js'

/** A field name Headers accepts (RFC 9110 `token`). */
const tokenPattern = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** A field value Headers refuses: NUL, CR or LF. */
const badValue = /[\0\r\n]/

/** HTTP whitespace at either end is not part of a value (as `Headers` normalizes it). */
function normalized(value: string): string {
  const first = value.charCodeAt(0)
  const last = value.charCodeAt(value.length - 1)
  return first === 32 || first === 9 || last === 32 || last === 9 || last === 10 || last === 13
    ? value.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '')
    : value
}

function checked(name: string, value: string): [string, string] {
  const text = normalized(String(value))
  if (!tokenPattern.test(name)) throw new TypeError(`Headers: invalid header name "${name}"`)
  if (badValue.test(text)) throw new TypeError(`Headers: invalid value of header "${name}"`)
  return [name.toLowerCase(), text]
}

/**
 * `Headers` over a plain record, filled from raw name and value pairs without a check per
 * field (Node's parser checked them). Reads, iterates and changes as `Headers` does.
 */
export class PlainHeaders implements Headers {
  /** Lower-case name to its values joined with `, ` (`set-cookie` lives in `#cookies`). */
  #fields: Map<string, string>
  #cookies: string[] | undefined
  /** The sorted entries, made when first iterated and dropped on a change. */
  #sorted: [string, string][] | undefined

  /** `raw`: names and values in turn, as `IncomingMessage.rawHeaders` holds them. */
  constructor(raw: readonly string[] = []) {
    const fields = new Map<string, string>()
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = (raw[i] as string).toLowerCase()
      const value = normalized(raw[i + 1] as string)
      if (name === 'set-cookie') {
        this.#cookies ??= []
        this.#cookies.push(value)
        continue
      }
      const before = fields.get(name)
      fields.set(name, before === undefined ? value : `${before}, ${value}`)
    }
    this.#fields = fields
  }

  get(name: string): string | null {
    const key = name.toLowerCase()
    if (key === 'set-cookie') return this.#cookies === undefined ? null : this.#cookies.join(', ')
    return this.#fields.get(key) ?? null
  }

  has(name: string): boolean {
    const key = name.toLowerCase()
    return key === 'set-cookie' ? this.#cookies !== undefined : this.#fields.has(key)
  }

  getSetCookie(): string[] {
    return this.#cookies === undefined ? [] : [...this.#cookies]
  }

  append(name: string, value: string): void {
    const [key, text] = checked(name, value)
    this.#sorted = undefined
    if (key === 'set-cookie') {
      this.#cookies ??= []
      this.#cookies.push(text)
      return
    }
    const before = this.#fields.get(key)
    this.#fields.set(key, before === undefined ? text : `${before}, ${text}`)
  }

  set(name: string, value: string): void {
    const [key, text] = checked(name, value)
    this.#sorted = undefined
    if (key === 'set-cookie') this.#cookies = [text]
    else this.#fields.set(key, text)
  }

  delete(name: string): void {
    const key = name.toLowerCase()
    this.#sorted = undefined
    if (key === 'set-cookie') this.#cookies = undefined
    else this.#fields.delete(key)
  }

  /** The entries as `Headers` iterates them: sorted by name, each `set-cookie` on its own. */
  #entries(): [string, string][] {
    if (this.#sorted !== undefined) return this.#sorted
    const entries: [string, string][] = []
    for (const [name, value] of this.#fields) entries.push([name, value])
    if (this.#cookies !== undefined)
      for (const cookie of this.#cookies) entries.push(['set-cookie', cookie])
    // A stable sort: the cookies keep their order.
    if (entries.length > 1) entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    this.#sorted = entries
    return entries
  }

  forEach(
    callback: (value: string, key: string, parent: Headers) => void,
    thisArg?: unknown,
  ): void {
    for (const [name, value] of this.#entries()) callback.call(thisArg, value, name, this)
  }

  *entries(): HeadersIterator<[string, string]> {
    for (const [name, value] of this.#entries()) yield [name, value]
  }

  *keys(): HeadersIterator<string> {
    for (const [name] of this.#entries()) yield name
  }

  *values(): HeadersIterator<string> {
    for (const [, value] of this.#entries()) yield value
  }

  [Symbol.iterator](): HeadersIterator<[string, string]> {
    return this.entries()
  }

  get [Symbol.toStringTag](): string {
    return 'Headers'
  }
}
// `instanceof Headers` holds: every member is the class's own, none reaches undici's.
Object.setPrototypeOf(PlainHeaders.prototype, Headers.prototype)

/** Statuses whose `Response` cannot have a body. */
const nullBodyStatuses = new Set([101, 204, 205, 304])

/**
 * A `Response` of a status, headers and an async iterable body, made with no undici state:
 * every member is its own (see the module's head). `body` is a web stream made when first
 * asked for; the frame reader reads the iterable itself. Read the body once, one way.
 */
export class PlainResponse implements Response {
  readonly status: number
  readonly statusText: string
  readonly headers: Headers
  readonly #source: AsyncIterable<Uint8Array> | null
  #stream: ReadableStream<Uint8Array<ArrayBuffer>> | null | undefined
  #used = false
  #teed = false

  constructor(
    status: number,
    statusText: string,
    headers: Headers,
    body: AsyncIterable<Uint8Array> | null,
  ) {
    if (!Number.isInteger(status) || status < 200 || status > 599) {
      throw new RangeError(`the status ${status} is not a response's (200 to 599)`)
    }
    this.status = status
    this.statusText = statusText
    this.headers = headers
    this.#source = nullBodyStatuses.has(status) ? null : body
  }

  get type(): ResponseType {
    return 'default'
  }

  get url(): string {
    return ''
  }

  get redirected(): boolean {
    return false
  }

  get ok(): boolean {
    return this.status >= 200 && this.status <= 299
  }

  get body(): ReadableStream<Uint8Array<ArrayBuffer>> | null {
    if (this.#stream === undefined) {
      this.#stream =
        this.#source === null
          ? null
          : (streamOver(this.#source) as ReadableStream<Uint8Array<ArrayBuffer>>)
    }
    return this.#stream
  }

  get bodyUsed(): boolean {
    return this.#used || (this.#stream?.locked ?? false)
  }

  /** The iterable body, for the frame reader (see `frameSourceOf`). */
  get [iterableBody](): AsyncIterable<Uint8Array> | null {
    return this.#teed ? null : this.#source
  }

  /** A real `Response` over this one's body, for the readers of a whole body. */
  #whole(): Response {
    if (this.bodyUsed) throw new TypeError('Body is unusable: Body has already been read')
    const body = this.body
    this.#used = true
    return new Response(body, { status: this.status, headers: this.headers })
  }

  text(): Promise<string> {
    try {
      return this.#whole().text()
    } catch (error) {
      return Promise.reject(error)
    }
  }

  json(): Promise<unknown> {
    try {
      return this.#whole().json()
    } catch (error) {
      return Promise.reject(error)
    }
  }

  arrayBuffer(): Promise<ArrayBuffer> {
    try {
      return this.#whole().arrayBuffer()
    } catch (error) {
      return Promise.reject(error)
    }
  }

  blob(): Promise<Blob> {
    try {
      return this.#whole().blob()
    } catch (error) {
      return Promise.reject(error)
    }
  }

  bytes(): Promise<Uint8Array<ArrayBuffer>> {
    try {
      return this.#whole().bytes()
    } catch (error) {
      return Promise.reject(error)
    }
  }

  formData(): Promise<FormData> {
    try {
      return this.#whole().formData()
    } catch (error) {
      return Promise.reject(error)
    }
  }

  clone(): Response {
    if (this.bodyUsed) throw new TypeError('Response.clone: Body has already been consumed.')
    const init = { status: this.status, statusText: this.statusText, headers: this.headers }
    const body = this.body
    if (body === null) return new Response(null, init)
    const [mine, theirs] = body.tee()
    this.#stream = mine
    // The iterable now feeds both branches: readers of this one read `mine`.
    this.#teed = true
    return new Response(theirs, init)
  }

  get [Symbol.toStringTag](): string {
    return 'Response'
  }
}
Object.setPrototypeOf(PlainResponse.prototype, Response.prototype)
