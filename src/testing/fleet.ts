/**
 * `createSimulatedFleet`: one local upstream that answers for several provider keys, each
 * with its own request and token buckets, time to first token, and way of stating its rate
 * limits (honestly, not at all, or falsely), so a key pool's selection can be measured
 * against limits it is not told.
 *
 * @module
 */

import { rejectUnknownKeys } from '../options.js'
import { adapterForUrl } from '../protocols/adapter-for-url.js'
import { anthropicMessages } from '../protocols/anthropic-messages.js'
import { openaiChat } from '../protocols/openai-chat.js'
import type { Step } from './fault-steps.js'
import { playSteps, statedOutputTokens } from './faulty-upstream.js'
import { wireFor } from './wire.js'
import type { WireWriter } from './wire-format.js'

/**
 * How a key states its rate limits:
 * - `honest`: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (OpenAI's, on every
 *   protocol but Anthropic's) or `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`
 *   (Anthropic Messages) on every answer, true at the moment of the answer; a 429 also says when
 *   the request would fit (`retry-after` in whole seconds, rounded up, and, except on Anthropic,
 *   `retry-after-ms`).
 * - `none`: no rate-limit header at all; a 429 is bare.
 * - `lying`: every answer says the key is full (`remaining` = the limit) and resets now
 *   (`0s`, or the current time on Anthropic); a 429 carries no `retry-after`.
 *
 * @group Fault injection
 */
export type FleetHeaderMode = 'honest' | 'none' | 'lying'

/**
 * One key of a {@link createSimulatedFleet | simulated fleet}. Its `id` and `secret` are a
 * {@link "stream-boundary"!PoolKey | PoolKey}'s, so the same list can make the pool.
 *
 * @group Fault injection
 */
export interface FleetKey {
  /** The name the fleet counts the key under. */
  readonly id: string
  /**
   * The credential its requests carry: `authorization: Bearer <secret>`, `x-api-key`,
   * `api-key` or `x-goog-api-key`.
   */
  readonly secret: string
  /**
   * Requests the key may send per `windowMs`: a bucket of this many that refills evenly over
   * the window, full at the start.
   * @default Infinity
   */
  readonly requestsPerWindow?: number
  /**
   * Tokens the key may spend per `windowMs`, a bucket as `requestsPerWindow`. A request
   * spends its input (a quarter of its body's length, rounded up) and the output budget it
   * states (`max_tokens`, `max_completion_tokens`, `max_output_tokens`,
   * `generationConfig.maxOutputTokens`; none stated: 0), at once, as providers reserve it.
   * @default Infinity
   */
  readonly tokensPerWindow?: number
  /** Milliseconds from the answer's headers to its first token. @default 0 */
  readonly firstTokenMs?: number
  /** How the key states its limits. @default 'honest' */
  readonly headers?: FleetHeaderMode
}

/**
 * Options of {@link createSimulatedFleet}.
 *
 * @group Fault injection
 */
export interface SimulatedFleetOptions {
  /** The keys; a request with another credential is answered 401. */
  readonly keys: readonly FleetKey[]
  /**
   * The span each bucket refills over: 60 000 for per-minute limits, 1 000 to run a minute's
   * traffic in a second.
   * @default 60_000
   */
  readonly windowMs?: number
  /** How long a 429 takes to arrive. @default 0 */
  readonly rateLimitedMs?: number
  /** The text of every answer. @default 'The quick brown fox jumps over the lazy dog.' */
  readonly text?: string
  /** Gap between the frames of an answer after its first token. @default 0 */
  readonly frameDelayMs?: number
}

/**
 * What one key of a fleet was asked and answered.
 *
 * @group Fault injection
 */
export interface FleetKeyStats {
  /** Requests that carried the key. */
  readonly requests: number
  /** Of them, answered 429. */
  readonly rateLimited: number
  /** Of them, answered (200, streaming or not). */
  readonly served: number
}

/**
 * A running simulated fleet.
 *
 * @group Fault injection
 */
export interface SimulatedFleet {
  /** A `fetch` that answers in process, without sockets. */
  readonly fetch: (input: string | URL | Request, init?: RequestInit) => Promise<Response>
  /** Serves the fleet on 127.0.0.1 and an ephemeral port (unless given one); its base URL. */
  listen(port?: number): Promise<string>
  /** Stops the server (if listening), every answer still streaming and every pending 429. */
  close(): Promise<void>
  /** Counts per key id since the start or the last `reset()`. */
  stats(): Readonly<Record<string, FleetKeyStats>>
  /** Requests whose credential named no key (answered 401). */
  readonly unknownCredentials: number
  /** Fills every bucket and zeroes the counts. */
  reset(): void
}

const headerModes: readonly FleetHeaderMode[] = ['honest', 'none', 'lying']

/** A bucket of `capacity` that refills over `windowMs`; an infinite one never runs out. */
class Bucket {
  level: number
  at: number
  readonly perMs: number
  constructor(
    readonly capacity: number,
    windowMs: number,
    now: number,
  ) {
    this.level = capacity
    this.at = now
    this.perMs = capacity / windowMs
  }
  refill(now: number): void {
    if (this.capacity === Number.POSITIVE_INFINITY) return
    this.level = Math.min(this.capacity, this.level + (now - this.at) * this.perMs)
    this.at = now
  }
  /** Milliseconds until `amount` fits (0 if it does). */
  waitFor(amount: number): number {
    if (this.level >= amount) return 0
    return (amount - this.level) / this.perMs
  }
  /** Milliseconds until full. */
  untilFull(): number {
    return this.capacity === Number.POSITIVE_INFINITY
      ? 0
      : (this.capacity - this.level) / this.perMs
  }
}

interface KeyState {
  readonly key: FleetKey
  readonly mode: FleetHeaderMode
  readonly firstTokenMs: number
  requests: Bucket
  tokens: Bucket
  stats: { requests: number; rateLimited: number; served: number }
}

/** A quarter of the body's length (input) plus the output budget the body states. */
function requestCost(body: string): number {
  const output = statedOutputTokens(body) ?? 0
  return Math.ceil(body.length / 4) + Math.max(output, 0)
}

/** `1.25s`, `20ms`, `6m0s`: OpenAI's reset durations. */
function duration(ms: number): string {
  const whole = Math.ceil(ms)
  if (whole < 1000) return `${whole}ms`
  const minutes = Math.floor(whole / 60_000)
  const seconds = Number(((whole % 60_000) / 1000).toFixed(3))
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`
}

function credentialOf(headers: Headers, url: URL): string | undefined {
  const bearer = /^Bearer\s+(.+)$/i.exec(headers.get('authorization') ?? '')?.[1]
  return (
    bearer ??
    headers.get('x-api-key') ??
    headers.get('api-key') ??
    headers.get('x-goog-api-key') ??
    url.searchParams.get('key') ??
    undefined
  )
}

/** The rate-limit headers of one answer, as the key's mode states them. */
function limitHeaders(state: KeyState, anthropic: boolean): Record<string, string> {
  if (state.mode === 'none') return {}
  const headers: Record<string, string> = {}
  const lying = state.mode === 'lying'
  for (const [name, bucket] of [
    ['requests', state.requests],
    ['tokens', state.tokens],
  ] as const) {
    if (bucket.capacity === Number.POSITIVE_INFINITY) continue
    const remaining = String(lying ? bucket.capacity : Math.floor(bucket.level))
    const resetMs = lying ? 0 : bucket.untilFull()
    if (anthropic) {
      headers[`anthropic-ratelimit-${name}-limit`] = String(bucket.capacity)
      headers[`anthropic-ratelimit-${name}-remaining`] = remaining
      headers[`anthropic-ratelimit-${name}-reset`] = new Date(
        Date.now() + Math.ceil(resetMs),
      ).toISOString()
    } else {
      headers[`x-ratelimit-limit-${name}`] = String(bucket.capacity)
      headers[`x-ratelimit-remaining-${name}`] = remaining
      headers[`x-ratelimit-reset-${name}`] = duration(resetMs)
    }
  }
  return headers
}

function checkKeys(keys: readonly FleetKey[]): void {
  if (!Array.isArray(keys) || keys.length === 0)
    throw new TypeError('createSimulatedFleet: keys must be a non-empty array')
  const ids = new Set<string>()
  const secrets = new Set<string>()
  for (const [index, key] of keys.entries()) {
    rejectUnknownKeys(`createSimulatedFleet: keys[${index}]`, key, [
      'id',
      'secret',
      'requestsPerWindow',
      'tokensPerWindow',
      'firstTokenMs',
      'headers',
    ] satisfies (keyof FleetKey)[])
    if (typeof key.id !== 'string' || key.id === '' || ids.has(key.id))
      throw new TypeError(
        `createSimulatedFleet: keys[${index}].id must be a unique non-empty string`,
      )
    // The message names the position only: the value is a secret.
    if (typeof key.secret !== 'string' || key.secret === '' || secrets.has(key.secret))
      throw new TypeError(
        `createSimulatedFleet: keys[${index}].secret must be a unique non-empty string`,
      )
    ids.add(key.id)
    secrets.add(key.secret)
    for (const field of ['requestsPerWindow', 'tokensPerWindow'] as const) {
      const value = key[field]
      if (value !== undefined && !(typeof value === 'number' && value > 0))
        throw new RangeError(
          `createSimulatedFleet: keys[${index}].${field} must be a number > 0 or Infinity, got ${String(value)}`,
        )
    }
    checkMs(`keys[${index}].firstTokenMs`, key.firstTokenMs)
    if (key.headers !== undefined && !headerModes.includes(key.headers))
      throw new RangeError(
        `createSimulatedFleet: keys[${index}].headers must be 'honest', 'none' or 'lying', got ${String(key.headers)}`,
      )
  }
}

function checkMs(name: string, value: number | undefined, min = 0): void {
  if (value !== undefined && !(Number.isFinite(value) && value >= min))
    throw new RangeError(
      `createSimulatedFleet: ${name} must be a finite number >= ${min}, got ${String(value)}`,
    )
}

/** Validates the options of {@link createSimulatedFleet} and every key in them. */
function checkFleetOptions(options: SimulatedFleetOptions): void {
  rejectUnknownKeys('createSimulatedFleet', options, [
    'keys',
    'windowMs',
    'rateLimitedMs',
    'text',
    'frameDelayMs',
  ] satisfies (keyof SimulatedFleetOptions)[])
  checkKeys(options.keys)
  checkMs('windowMs', options.windowMs, 1)
  checkMs('rateLimitedMs', options.rateLimitedMs)
  checkMs('frameDelayMs', options.frameDelayMs)
}

/** A running fleet's settings (defaults applied) and what changes while it runs. */
interface FleetState {
  readonly windowMs: number
  readonly rateLimitedMs: number
  readonly frameDelayMs: number
  /** The answer's text cut into the pieces its frames carry, and whole. */
  readonly pieces: readonly string[]
  readonly text: string
  /** Stops of every pending pause and every answer still streaming, run on close. */
  readonly opened: Set<() => void>
  /** Each key's buckets and counts, by its secret. */
  readonly states: Map<string, KeyState>
  unknownCredentials: number
}

/** A key with full buckets and zero counts. */
function freshKeyState(key: FleetKey, windowMs: number): KeyState {
  const now = performance.now()
  return {
    key,
    mode: key.headers ?? 'honest',
    firstTokenMs: key.firstTokenMs ?? 0,
    requests: new Bucket(key.requestsPerWindow ?? Number.POSITIVE_INFINITY, windowMs, now),
    tokens: new Bucket(key.tokensPerWindow ?? Number.POSITIVE_INFINITY, windowMs, now),
    stats: { requests: 0, rateLimited: 0, served: 0 },
  }
}

/** The fleet's state at its start, from options already checked. */
function initialFleetState(options: SimulatedFleetOptions): FleetState {
  const windowMs = options.windowMs ?? 60_000
  const pieces = (options.text ?? 'The quick brown fox jumps over the lazy dog.').match(
    /^\s*\S+\s*|\S+\s*/g,
  ) ?? ['']
  return {
    windowMs,
    rateLimitedMs: options.rateLimitedMs ?? 0,
    frameDelayMs: options.frameDelayMs ?? 0,
    pieces,
    text: pieces.join(''),
    opened: new Set<() => void>(),
    states: new Map(options.keys.map((key) => [key.secret, freshKeyState(key, windowMs)])),
    unknownCredentials: 0,
  }
}

/** Resolves after `ms`, rejects when the request is aborted, ends early on close. */
function pause(ms: number, signal: AbortSignal, opened: Set<() => void>): Promise<void> {
  if (ms <= 0) return Promise.resolve()
  return new Promise((resolve, reject) => {
    const done = () => {
      clearTimeout(timer)
      opened.delete(done)
      signal.removeEventListener('abort', aborted)
      resolve()
    }
    const aborted = () => {
      done()
      reject(signal.reason)
    }
    const timer = setTimeout(done, ms)
    opened.add(done)
    signal.addEventListener('abort', aborted, { once: true })
  })
}

/** A JSON answer with `extra` headers. */
function jsonResponse(status: number, text: string, extra: Record<string, string> = {}): Response {
  return new Response(text, {
    status,
    headers: { 'content-type': 'application/json', ...extra },
  })
}

/** The 429 of a key whose buckets cannot hold the request for `waitMs` yet. */
async function rateLimitedResponse(
  fleet: FleetState,
  state: KeyState,
  waitMs: number,
  wire: WireWriter,
  anthropic: boolean,
  signal: AbortSignal,
): Promise<Response> {
  state.stats.rateLimited++
  const headers = limitHeaders(state, anthropic)
  if (state.mode === 'honest') {
    headers['retry-after'] = String(Math.ceil(waitMs / 1000))
    if (!anthropic) headers['retry-after-ms'] = String(Math.ceil(waitMs))
  }
  await pause(fleet.rateLimitedMs, signal, fleet.opened)
  return jsonResponse(
    429,
    wire.errorBody(wire.rateLimitType, 'Rate limit reached for this key', 429),
    headers,
  )
}

/** The streaming 200: the start, the first-token wait, the text's frames, the finish. */
function streamingResponse(
  fleet: FleetState,
  state: KeyState,
  wire: WireWriter,
  headers: Record<string, string>,
  signal: AbortSignal,
): Response {
  const frames = fleet.pieces.flatMap((piece, i): Step[] => [
    ...(i > 0 && fleet.frameDelayMs > 0 ? [{ wait: fleet.frameDelayMs }] : []),
    ...wire.text(piece),
  ])
  const steps: Step[] = [
    ...wire.start(),
    ...(state.firstTokenMs > 0 ? [{ wait: state.firstTokenMs }] : []),
    ...frames,
    ...wire.finish('stop'),
  ]
  return new Response(
    playSteps(steps, signal, fleet.opened, () => {}),
    {
      status: 200,
      headers: {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        ...headers,
      },
    },
  )
}

/** Answers one request: 401 for an unknown credential, 429 when the key is full, else 200. */
async function handleFleetRequest(fleet: FleetState, request: Request): Promise<Response> {
  const url = new URL(request.url)
  const adapter = adapterForUrl(url) ?? openaiChat
  const wire = wireFor(adapter)
  const anthropic = adapter.name === anthropicMessages.name
  const body = request.body === null ? '' : await request.text()
  const secret = credentialOf(request.headers, url)
  const state = secret === undefined ? undefined : fleet.states.get(secret)
  if (state === undefined) {
    fleet.unknownCredentials++
    return jsonResponse(
      401,
      wire.errorBody('authentication_error', 'Incorrect API key provided', 401),
    )
  }
  state.stats.requests++
  const now = performance.now()
  state.requests.refill(now)
  state.tokens.refill(now)
  const cost = requestCost(body)
  const waitMs = Math.max(state.requests.waitFor(1), state.tokens.waitFor(cost))
  if (waitMs > 0) return rateLimitedResponse(fleet, state, waitMs, wire, anthropic, request.signal)
  state.requests.level -= 1
  state.tokens.level -= cost
  state.stats.served++
  const headers = limitHeaders(state, anthropic)
  const streaming = adapter.isStreamingRequest?.(url, body) ?? /"stream"\s*:\s*true/.test(body)
  if (!streaming) {
    await pause(state.firstTokenMs, request.signal, fleet.opened)
    return jsonResponse(200, JSON.stringify(wire.message(fleet.text)), headers)
  }
  return streamingResponse(fleet, state, wire, headers, request.signal)
}

/**
 * Creates a simulated provider fleet: one upstream (OpenAI Chat, Anthropic Messages, and
 * the other protocols the faulty upstream speaks, picked by path) that answers for every key
 * in `keys` by the request's credential, refusing with 429 what the key's buckets cannot
 * hold. The pool under test is not told the limits: it learns them from the answers, or not.
 *
 * @example
 * const fleet = createSimulatedFleet({
 *   windowMs: 1000, // per-second buckets: a minute's traffic in a second
 *   rateLimitedMs: 20,
 *   keys: [
 *     { id: 'small', secret: 'sk-small', requestsPerWindow: 5, tokensPerWindow: 2_000 },
 *     { id: 'big', secret: 'sk-big', requestsPerWindow: 40, firstTokenMs: 30, headers: 'none' },
 *   ],
 * })
 * const baseURL = `${await fleet.listen()}/v1`
 * // ... drive a gateway whose pool holds the same keys, then:
 * console.log(fleet.stats()) // { small: { requests, rateLimited, served }, big: { ... } }
 * await fleet.close()
 *
 * @group Fault injection
 */
export function createSimulatedFleet(options: SimulatedFleetOptions): SimulatedFleet {
  checkFleetOptions(options)
  const fleet = initialFleetState(options)
  const handle = (request: Request) => handleFleetRequest(fleet, request)
  let server: { close(): Promise<void> } | undefined
  return {
    fetch: (input, init) => handle(new Request(input, init)),
    async listen(port = 0) {
      const { serveFetch } = await import('stream-boundary/node')
      const served = await serveFetch(handle, { port, host: '127.0.0.1' })
      server = served
      return served.url
    },
    async close() {
      for (const stop of [...fleet.opened]) stop()
      await server?.close()
      server = undefined
    },
    stats() {
      const out: Record<string, FleetKeyStats> = {}
      for (const state of fleet.states.values()) out[state.key.id] = { ...state.stats }
      return out
    },
    get unknownCredentials() {
      return fleet.unknownCredentials
    },
    reset() {
      for (const [secret, state] of fleet.states)
        fleet.states.set(secret, freshKeyState(state.key, fleet.windowMs))
      fleet.unknownCredentials = 0
    },
  }
}
