/**
 * `createFaultyUpstream`: an upstream that fails the way real ones do, scripted per request
 * (a scenario by header or by the chaos marker), in any shipped protocol, in process or on a
 * port.
 *
 * @module
 */

import { didYouMean, rejectUnknownKeys } from '../options.js'
import { adapterForUrl } from '../protocols/adapter-for-url.js'
import { openaiChat } from '../protocols/openai-chat.js'
import type { StreamAdapter } from '../protocols/types.js'
import { parseChaosMarker } from './chaos-marker.js'
import { plainPlays } from './fault-plain.js'
import { faultSteps, type Step, type StepContext } from './fault-steps.js'
import { checkScenarios, type Fault, type FaultKind, type Scenario } from './faults.js'
import { continuationRest, prefillOf } from './prefill.js'
import { wireFor } from './wire.js'

/**
 * Options of {@link createFaultyUpstream}.
 *
 * @group Fault injection
 */
export interface FaultyUpstreamOptions {
  /** Named scenarios, chosen per request by the `x-fault-scenario` header. */
  readonly scenarios?: Readonly<Record<string, Scenario>>
  /** The text of a normal answer. @default 'The quick brown fox jumps over the lazy dog.' */
  readonly text?: string
  /** The reasoning of `thinking-only`. @default 'Let me think about this step by step.' */
  readonly reasoning?: string
  /** Gap between the frames of a normal stream. @default 0 */
  readonly frameDelayMs?: number
  /** Gap between keep-alives of `keepalives-only`. @default 200 */
  readonly keepAliveMs?: number
  /**
   * Models that refuse a prefill, as newer Claude models do: a request for one of them that
   * continues a final assistant message (in its protocol's dialect) is answered
   * `400 invalid_request_error` "This model does not support assistant message prefill…",
   * whatever its scenario.
   * @default [] (every model continues a prefilled answer)
   * @example createFaultyUpstream({ refusePrefill: ['claude-new'] })
   */
  readonly refusePrefill?: readonly string[]
}

/** What a model that refuses a prefill answers (Anthropic's words). */
const prefillRefusalMessage =
  'This model does not support assistant message prefill. The conversation must end with a user message.'

/**
 * Where {@link FaultyUpstream.listen} serves.
 *
 * @group Fault injection
 */
export interface FaultyUpstreamListenOptions {
  /** @default 0 (an ephemeral port) */
  readonly port?: number
  /**
   * The address to bind. Only loopback by default: anyone who can reach the address gets
   * scripted failures and sees the requests' bodies recorded. Pass `'0.0.0.0'` or another
   * interface's address only when a gateway on another host must reach it.
   * @default '127.0.0.1'
   */
  readonly host?: string
}

/**
 * What one attempt received and which fault answered it.
 *
 * @group Fault injection
 */
export interface RecordedRequest {
  readonly scenario: string
  /** The marker's request id, when the body carried a {@link chaosMarker}. */
  readonly requestId: string | undefined
  /** 1 for the first request of its scenario (of its request id, for a marked request). */
  readonly attempt: number
  readonly fault: FaultKind
  /**
   * Whether the request asked for a stream. A plain request gets each fault's plain form (an
   * empty or cut JSON body, an error body); a fault with none is answered `501` naming it.
   */
  readonly streaming: boolean
  readonly protocol: string
  readonly method: string
  readonly path: string
  /** Request headers, credentials redacted. */
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  /** When the request arrived (`performance.now()`). */
  readonly startedAt: number
  /**
   * When the upstream let go of the request: its body ended, failed or was cancelled, or a
   * pending response was abandoned. `undefined` while it is still open.
   */
  readonly endedAt: number | undefined
}

/**
 * A running faulty upstream.
 *
 * @group Fault injection
 */
export interface FaultyUpstream {
  /** A `fetch` that answers in process, without sockets. */
  readonly fetch: (input: string | URL | Request, init?: RequestInit) => Promise<Response>
  /** The handler behind `fetch` and `listen`. */
  handle(request: Request): Promise<Response>
  /**
   * Serves the upstream over HTTP, on 127.0.0.1 and an ephemeral port unless told otherwise
   * (a number is the port); resolves to its base URL.
   * @example await upstream.listen({ port: 8080, host: '0.0.0.0' }) // reachable from other hosts
   */
  listen(options?: number | FaultyUpstreamListenOptions): Promise<string>
  /** Stops the server (if listening) and every stream still open. */
  close(): Promise<void>
  /** What each attempt received, in order. */
  readonly requests: readonly RecordedRequest[]
  /** Starts every scenario's attempt count again and forgets the recorded requests. */
  reset(): void
}

const encoder = new TextEncoder()

const secretHeaders = new Set([
  'authorization',
  'x-api-key',
  'x-goog-api-key',
  'api-key',
  'proxy-authorization',
])

/**
 * A body that plays steps, stops on cancel, and never leaves a timer behind.
 * @internal shared with the simulated fleet
 */
export function playSteps(
  steps: readonly Step[],
  signal: AbortSignal,
  opened: Set<() => void>,
  onEnd: () => void,
): ReadableStream<Uint8Array> {
  let index = 0
  let wake: (() => void) | undefined
  let timer: ReturnType<typeof setTimeout> | undefined
  /** `close`: the upstream shuts down (the stream ends); `abort`: the client gave up (it fails). */
  let stopped: 'close' | 'abort' | undefined
  const stop = (how: 'close' | 'abort' = 'close') => {
    stopped ??= how
    if (timer !== undefined) clearTimeout(timer)
    wake?.()
  }
  // The client's connection is gone: the upstream has let go, whether or not a read is pending.
  const onAbort = () => {
    stop('abort')
    onEnd()
  }
  opened.add(stop)
  if (signal.aborted) stopped = 'abort'
  else signal.addEventListener('abort', onAbort, { once: true })
  const release = () => {
    opened.delete(stop)
    signal.removeEventListener('abort', onAbort)
    onEnd()
  }
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          if (stopped !== undefined) {
            release()
            try {
              // As a real fetch body does: a client's abort fails the body, it does not end it.
              if (stopped === 'abort') controller.error(signal.reason)
              else controller.close()
            } catch {
              // Already cancelled.
            }
            return
          }
          const step = steps[index++]
          if (step === undefined) {
            release()
            controller.close()
            return
          }
          if (typeof step === 'string' || step instanceof Uint8Array) {
            controller.enqueue(typeof step === 'string' ? encoder.encode(step) : step)
            return
          }
          if ('reset' in step) {
            release()
            controller.error(
              Object.assign(new TypeError('terminated'), {
                cause: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
              }),
            )
            return
          }
          await new Promise<void>((resolve) => {
            wake = resolve
            if ('wait' in step) timer = setTimeout(resolve, step.wait)
          })
          timer = undefined
          wake = undefined
        }
      },
      cancel() {
        stop()
        release()
      },
    },
    { highWaterMark: 0 },
  )
}

/** The output budget a request asks for (any protocol's field), or 4096 when it names none. */
function requestedOutputTokens(body: string): number {
  return statedOutputTokens(body) ?? 4096
}

/**
 * The output budget a request body states in any protocol's field (`max_tokens`,
 * `max_completion_tokens`, `max_output_tokens`, Gemini's `generationConfig.maxOutputTokens`),
 * or `undefined` when it names none or is not JSON.
 * @internal shared with the simulated fleet
 */
export function statedOutputTokens(body: string): number | undefined {
  try {
    const parsed = JSON.parse(body) as Record<string, unknown>
    const config = parsed.generationConfig as Record<string, unknown> | undefined
    for (const value of [
      parsed.max_tokens,
      parsed.max_completion_tokens,
      parsed.max_output_tokens,
      config?.maxOutputTokens,
    ]) {
      if (typeof value === 'number') return value
    }
  } catch {
    // Not JSON: nothing stated.
  }
  return undefined
}

const htmlPage = (status: number, title: string) =>
  new Response(
    `<!DOCTYPE html><html><head><title>${status} ${title}</title></head><body><h1>${title}</h1></body></html>`,
    { status, headers: { 'content-type': 'text/html' } },
  )

/** The whole answer of a fault that is decided by its status and body alone, if it is one. */
function statusAnswer(
  fault: Fault,
  adapter: StreamAdapter,
  body: string,
  streaming: boolean,
): Response | undefined {
  const wire = wireFor(adapter)
  const json = (status: number, text: string, extra: Record<string, string> = {}) =>
    new Response(text, { status, headers: { 'content-type': 'application/json', ...extra } })
  if (fault.kind === 'streaming-unsupported' && streaming) {
    return json(
      404,
      wire.errorBody('not_found_error', 'Streaming is not supported on this endpoint', 404),
    )
  }
  if (fault.kind === 'context-overflow') {
    const limit = fault.limitTokens ?? 200_000
    const input = fault.inputTokens ?? 190_000
    const output = requestedOutputTokens(body)
    if (input + output > limit) {
      return json(
        400,
        wire.errorBody(wire.invalidRequestType, wire.overflowMessage(input, output, limit), 400),
      )
    }
  }
  switch (fault.kind) {
    case 'rate-limited': {
      const extra: Record<string, string> =
        fault.retryAfterMs === undefined
          ? { 'retry-after': String(fault.retryAfterSeconds ?? 1) }
          : { 'retry-after-ms': String(fault.retryAfterMs) }
      return json(
        429,
        wire.errorBody(wire.rateLimitType, 'Rate limit reached for this key', 429),
        extra,
      )
    }
    case 'overloaded':
      return json(529, wire.errorBody(wire.overloadType, 'Overloaded', 529))
    case 'html-500':
      return htmlPage(500, 'Internal Server Error')
    case 'html-200':
      // A captive portal or a misrouted proxy: success status, a web page for a body.
      return htmlPage(200, 'Service Temporarily Unavailable')
    case 'json-error-200':
      return json(
        200,
        wire.errorBody(
          'server_error',
          'The server had an error while processing your request',
          500,
        ),
      )
    default:
      return undefined
  }
}

/** An answer `status` with the protocol's error body (an invalid request's type). */
function errorResponse(adapter: StreamAdapter, status: number, message: string): Response {
  const wire = wireFor(adapter)
  return new Response(wire.errorBody(wire.invalidRequestType, message, status), {
    status,
    headers: { 'content-type': 'application/json' },
  })
}

/**
 * The message for a scenario name the upstream was not given (`default`, the name of a request
 * that names none, plays `ok` unless given): a typo must not silently play a healthy answer.
 */
function unknownScenario(name: string, known: readonly string[]): string {
  const list = known.length === 0 ? 'none were given' : `known: ${known.join(', ')}`
  return `faulty upstream: unknown scenario ${JSON.stringify(name)}${didYouMean(name, known)} (${list}); name it in createFaultyUpstream({ scenarios }) or the --scenarios of \`stream-boundary upstream\``
}

/** Whether `body` continues a prefilled answer for one of the `models` that refuse it. */
function refusesPrefill(
  adapter: StreamAdapter,
  body: string,
  models: ReadonlySet<string>,
): boolean {
  if (prefillOf(adapter, body) === undefined) return false
  try {
    const { model } = JSON.parse(body) as { model?: unknown }
    return typeof model === 'string' && models.has(model)
  } catch {
    return false
  }
}

/** The options of {@link createFaultyUpstream}, checked and with their defaults. */
interface Settings {
  readonly scenarios: Readonly<Record<string, Scenario>>
  readonly refusePrefill: ReadonlySet<string>
  readonly text: string
  readonly reasoning: string
  readonly frameDelayMs: number
  readonly keepAliveMs: number
}

/** Checks the options of {@link createFaultyUpstream} and fills in their defaults. */
function settingsOf(options: FaultyUpstreamOptions): Settings {
  rejectUnknownKeys('createFaultyUpstream', options, [
    'scenarios',
    'text',
    'reasoning',
    'frameDelayMs',
    'keepAliveMs',
    'refusePrefill',
  ] satisfies (keyof FaultyUpstreamOptions)[])
  const refusePrefill = new Set(options.refusePrefill ?? [])
  const scenarios = options.scenarios ?? {}
  checkScenarios(scenarios)
  return {
    scenarios,
    refusePrefill,
    text: options.text ?? 'The quick brown fox jumps over the lazy dog.',
    reasoning: options.reasoning ?? 'Let me think about this step by step.',
    frameDelayMs: options.frameDelayMs ?? 0,
    keepAliveMs: options.keepAliveMs ?? 200,
  }
}

/**
 * The fault that answers the next attempt of scenario `name`, and that attempt's number:
 * counted (in `counts`) by request id for a marked request, else by scenario name.
 */
function nextFault(
  scenarios: Readonly<Record<string, Scenario>>,
  counts: Map<string, number>,
  name: string,
  requestId: string | undefined,
): { fault: Fault; attempt: number } {
  const scenario = scenarios[name] ?? ['ok']
  const counter = requestId === undefined ? `scenario:${name}` : `id:${requestId}`
  const attempt = (counts.get(counter) ?? 0) + 1
  counts.set(counter, attempt)
  const fault = scenario[Math.min(attempt - 1, scenario.length - 1)] ?? 'ok'
  if (fault === 'empty-eof') return { fault: { kind: 'empty' }, attempt }
  return { fault: typeof fault === 'string' ? { kind: fault } : fault, attempt }
}

/** A request's headers as recorded: credentials redacted. */
function redactedHeaders(headers: Headers): Record<string, string> {
  const redacted: Record<string, string> = {}
  for (const [name, value] of headers)
    redacted[name] = secretHeaders.has(name) ? '[redacted]' : value
  return redacted
}

/**
 * An answer that never sends its headers: it fails when the client gives up or the upstream
 * closes, and only then lets go of the request.
 */
function hangBeforeHeaders(
  request: Request,
  opened: Set<() => void>,
  ended: () => void,
): Promise<Response> {
  return new Promise<Response>((_, reject) => {
    // The closure holds the request, not only its signal: undici aborts a request's signal
    // through a weak reference, so a request nothing holds may be collected and its signal
    // never abort.
    const stop = () => {
      opened.delete(stop)
      ended()
      reject(request.signal.reason ?? new DOMException('aborted', 'AbortError'))
    }
    // The signal may have aborted while the request's body was read: no event comes then.
    if (request.signal.aborted) return stop()
    opened.add(stop)
    request.signal.addEventListener('abort', stop, { once: true })
  })
}

/** One recorded request, as {@link answerOf} reads it. */
interface Attempt {
  readonly request: Request
  readonly adapter: StreamAdapter
  readonly body: string
  readonly streaming: boolean
  readonly fault: Fault
  readonly attempt: number
  /** Whether the body carried a {@link chaosMarker} (its answers are tagged by attempt). */
  readonly marked: boolean
  /** The number of requests recorded so far, this one included. */
  readonly recorded: number
  /** Marks the recorded request as let go of. */
  readonly ended: () => void
}

/** The answer to a recorded request: a prefill refusal, its fault's status answer, or its steps. */
function answerOf(
  settings: Settings,
  opened: Set<() => void>,
  attempt: Attempt,
): Response | Promise<Response> {
  const { adapter, body, fault, streaming, ended } = attempt
  if (settings.refusePrefill.size > 0 && refusesPrefill(adapter, body, settings.refusePrefill)) {
    ended()
    return errorResponse(adapter, 400, prefillRefusalMessage)
  }
  const tag = attempt.marked ? `[attempt ${attempt.attempt}] ` : ''
  // A continuation (a prefilled final assistant message) gets the rest of the answer it began.
  const rest = continuationRest(adapter, body, settings.text, attempt.marked ? attempt.attempt : 0)
  const early = statusAnswer(fault, adapter, body, streaming)
  if (early !== undefined) {
    ended()
    return early
  }
  if (fault.kind === 'hang-before-headers') {
    return hangBeforeHeaders(attempt.request, opened, ended)
  }
  const context: StepContext = {
    fault,
    wire: wireFor(adapter),
    answer: rest ?? `${tag}${settings.text}`,
    thought: `${tag}${settings.reasoning}`,
    tag: rest === undefined ? tag : '',
    frameDelayMs: settings.frameDelayMs,
    keepAliveMs: settings.keepAliveMs,
  }
  const play = streaming
    ? { steps: faultSteps[fault.kind](context) }
    : plainPlays[fault.kind](context)
  if ('refused' in play) {
    ended()
    return errorResponse(adapter, 501, `faulty upstream: ${play.refused}`)
  }
  return new Response(playSteps(play.steps, attempt.request.signal, opened, ended), {
    status: 200,
    headers: {
      'content-type': streaming ? 'text/event-stream; charset=utf-8' : 'application/json',
      'cache-control': 'no-cache',
      'x-request-id': `req_faulty_${attempt.recorded}`,
      // Served over HTTP, the body is then delimited by the connection's close, not chunked.
      ...(fault.kind === 'eof-mid-frame-close' ? { connection: 'close' } : {}),
    },
  })
}

/**
 * Creates a faulty upstream.
 *
 * @example
 * const upstream = createFaultyUpstream({ scenarios: { flaky: ['empty', 'ok'] } })
 * const client = new OpenAI({ apiKey: 'sk-test', baseURL: 'http://upstream.test/v1', fetch: upstream.fetch,
 *   defaultHeaders: { 'x-fault-scenario': 'flaky' } })
 *
 * @group Fault injection
 */
export function createFaultyUpstream(options: FaultyUpstreamOptions = {}): FaultyUpstream {
  const settings = settingsOf(options)
  const { scenarios } = settings
  const requests: RecordedRequest[] = []
  const counts = new Map<string, number>()
  const opened = new Set<() => void>()
  let server: { close(): Promise<void> } | undefined

  async function handle(request: Request): Promise<Response> {
    const url = new URL(request.url)
    const adapter = adapterForUrl(url) ?? openaiChat
    if (request.signal.aborted) throw request.signal.reason
    const headers = redactedHeaders(request.headers)
    const body = request.body === null ? '' : await request.text()
    const marker = parseChaosMarker(body)
    const scenario = marker?.scenario ?? request.headers.get('x-fault-scenario') ?? 'default'
    if (scenario !== 'default' && !Object.hasOwn(scenarios, scenario)) {
      return errorResponse(adapter, 400, unknownScenario(scenario, Object.keys(scenarios)))
    }
    const { fault, attempt } = nextFault(scenarios, counts, scenario, marker?.requestId)
    // Each protocol says how a request asks for a stream (Gemini: by method, others: a body flag).
    const streaming = adapter.isStreamingRequest?.(url, body) ?? /"stream"\s*:\s*true/.test(body)
    const record = {
      scenario,
      streaming,
      requestId: marker?.requestId,
      attempt,
      fault: fault.kind,
      protocol: adapter.name,
      method: request.method,
      path: url.pathname,
      headers,
      body,
      startedAt: performance.now(),
      endedAt: undefined as number | undefined,
    }
    requests.push(record)
    const ended = () => {
      record.endedAt ??= performance.now()
    }
    const marked = marker !== undefined
    const recorded = requests.length
    return answerOf(settings, opened, {
      request,
      adapter,
      body,
      streaming,
      fault,
      attempt,
      marked,
      recorded,
      ended,
    })
  }

  return {
    fetch: (input, init) => handle(new Request(input, init)),
    handle,
    async listen(options = {}) {
      const { port = 0, host = '127.0.0.1' } =
        typeof options === 'number' ? { port: options } : options
      const { serveFetch } = await import('stream-boundary/node')
      const served = await serveFetch(handle, { port, host })
      server = served
      return served.url
    },
    async close() {
      for (const stop of [...opened]) stop()
      await server?.close()
      server = undefined
    },
    get requests() {
      return requests
    },
    reset() {
      counts.clear()
      requests.length = 0
    },
  }
}
