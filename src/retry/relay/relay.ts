import { now } from '../../call-safely.js'
import { wholeStreamTranslator } from '../../commit/encoder.js'
import { createCommitGate } from '../../commit/gate.js'
import type { CommitGate } from '../../commit/gate-options.js'
import { StreamTimeoutError } from '../../errors.js'
import { followSignals, followStops } from '../../follow-signals.js'
import type { KeyPool } from '../../key-pool/types.js'
import { rejectUnknownKeys } from '../../options.js'
import { requestedModel } from '../../protocols/identity.js'
import type { StreamAdapter, UpstreamRequest } from '../../protocols/types.js'
import { realSignal, type SignalLike, stopOf } from '../../stop.js'
import { deadlineVerdict } from '../decisions/decide.js'
import { keysBackAfter } from '../decisions/keys-back.js'
import { initialRouteProgress } from '../decisions/route-progress.js'
import { countRequest } from '../route/hedge.js'
import { runRoute } from '../route/route.js'
import type { RouteEnd, Run } from '../route/run.js'
import type {
  AttemptFunction,
  AttemptRequest,
  CallerCredentialsAttemptFunction,
  Route,
} from '../shared/attempt-types.js'
import { callHook, neverAborted } from '../shared/hooks.js'
import {
  type EngineOutcome,
  isCompleteAnswer,
  type RelayHooks,
  type RelayOptions,
  type RelayOutcome,
  type RelayRequestOptions,
  resultOf,
} from '../shared/outcome.js'
import type { NormalizedRelayPolicy } from '../shared/policy-types.js'
import { guardAdapter, guardFunction } from '../shared/user-code.js'
import { answerRefusedOptions, giveUp, giveUpAfterThrow } from './give-up.js'
import { checkTranslation, normalizeRelayPolicy } from './policy.js'

/**
 * Whether the client asked for a stream: the `stream` option, else what `request` says in the
 * adapter's terms; `undefined` when it says nothing (no `stream` in the body, a URL that is
 * not a streaming one): then the answer decides (an event stream is relayed as one).
 */
function asksForStream(options: RelayRequestOptions): boolean | undefined {
  if (options.stream !== undefined) return options.stream
  const request = options.request
  if (request === undefined) return true
  if (request.body.stream === true || urlAsksForStream(options.adapter, request.url)) return true
  return request.body.stream === false ? false : undefined
}

/** The adapter's `isStreamingRequest` for the request's URL (Gemini's `:streamGenerateContent`). */
function urlAsksForStream(adapter: StreamAdapter, url: string | undefined): boolean {
  if (url === undefined || adapter.isStreamingRequest === undefined) return false
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return false
  }
  return adapter.isStreamingRequest(parsed, undefined)
}

/** What the overloads with a `request` take: their attempts get `context.request` defined. */
type RelayOptionsWithRequest = RelayRequestOptions & { readonly request: UpstreamRequest } & (
    | { readonly pool: KeyPool; readonly attempt: AttemptFunction<AttemptRequest> }
    | {
        readonly pool?: undefined
        readonly attempt: CallerCredentialsAttemptFunction<AttemptRequest>
      }
  )

/** Every option of `relay()`: a table the compiler keeps complete. */
const relayKeys = Object.keys({
  sink: true,
  adapter: true,
  name: true,
  policy: true,
  signal: true,
  hooks: true,
  request: true,
  stream: true,
  secrets: true,
  pool: true,
  attempt: true,
} satisfies Record<keyof RelayRequestOptions | 'pool' | 'attempt', true>)

const hookKeys = Object.keys({
  onAttempt: true,
  onRetry: true,
  onHedge: true,
  onHedgeSkipped: true,
  onContinuation: true,
  onCommit: true,
  onGiveUp: true,
  onOutcome: true,
} satisfies Record<keyof RelayHooks, true>)

function checkOptions(options: RelayOptions): void {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('relay() needs an options object')
  }
  rejectUnknownKeys('relay', options, relayKeys)
  rejectUnknownKeys('relay: hooks', options.hooks, hookKeys)
  if (typeof options.attempt !== 'function') throw new TypeError('attempt must be a function')
  if (options.pool !== undefined && typeof options.pool.acquire !== 'function') {
    throw new TypeError('pool must be a KeyPool (or left out when the caller owns the credentials)')
  }
  if (typeof options.adapter?.inspect !== 'function') {
    throw new TypeError('adapter must be a StreamAdapter')
  }
  if (typeof options.sink?.sendHead !== 'function')
    throw new TypeError('sink must be a DownstreamSink')
  if (options.stream !== undefined && typeof options.stream !== 'boolean') {
    throw new TypeError(`stream must be a boolean, got ${typeof options.stream}`)
  }
  if (
    options.secrets !== undefined &&
    (!Array.isArray(options.secrets) || options.secrets.some((s) => typeof s !== 'string'))
  ) {
    throw new TypeError('secrets must be a list of strings')
  }
}

/** The policy with the host's client-side adapter and translator guarded. */
function guarded(config: NormalizedRelayPolicy): NormalizedRelayPolicy {
  const { adapter, transform } = config.downstream
  if (adapter === undefined && transform === undefined) return config
  return {
    ...config,
    downstream: {
      ...config.downstream,
      adapter: guardAdapter(adapter),
      transform: guardFunction('downstream.transform', transform),
    },
  }
}

/**
 * Validates the options and builds the request's shared parts. A bad option is returned
 * (`refused`) before anything is leased; `relay()` answers the client through the sink
 * (`answerRefusedOptions`) and rejects with it, so a response waiting on the sink settles
 * instead of hanging or being cut.
 */
function prepare(
  options: RelayOptions,
):
  | { config: NormalizedRelayPolicy; whole: boolean; answerDecides: boolean; gate: CommitGate }
  | { refused: unknown } {
  try {
    checkOptions(options)
    const config = normalizeRelayPolicy(options.policy)
    for (const route of options.policy?.routes ?? [])
      checkOptions({ ...options, ...route } as RelayOptions)
    if (options.pool === undefined && config.hedge?.options.sameKey === false) {
      throw new TypeError(
        'policy.hedge cannot hedge a relay without a pool: a hedge needs another key, or the same credential again with createHedging({ sameKey: true })',
      )
    }
    // The adapter's `isStreamingRequest` is the host's code: a throw from it names it.
    checkTranslation(config.downstream, [
      options.adapter,
      ...(options.policy?.routes ?? []).map((route) => route.adapter),
    ])
    const asked = asksForStream({ ...options, adapter: guardAdapter(options.adapter) })
    const whole = asked !== true
    const client = config.downstream.adapter
    // Of the translators, only `Response → Response` is given whole answers too.
    const translator = wholeStreamTranslator(config.downstream)?.kind
    if (whole && translator !== undefined && translator !== 'response') {
      throw new TypeError(
        `a non-streaming request cannot go through a stream translator (downstream.${translator === 'frames' ? 'translateFrames' : 'translateStream'}): use downstream.translateResponse, which is given whole answers too, or pass stream: true when the client asked for a stream`,
      )
    }
    if (whole && client !== undefined && client !== options.adapter && translator === undefined) {
      throw new TypeError(
        'a non-streaming request cannot be translated by downstream.adapter: use downstream.translateResponse, which is given whole answers too, send the upstream a streaming request, or translate the whole answer in the host',
      )
    }
    const gate = createCommitGate(options.sink, {
      // A whole answer has one head, sent with it.
      earlyHeaders: config.earlyHeaders && !whole,
      keepAliveIntervalMs:
        config.downstream.keepAlive === false
          ? Number.POSITIVE_INFINITY
          : config.keepAliveIntervalMs,
      keepAliveAfterContent: config.downstream.keepAlive === true,
      writeStallTimeoutMs: config.pump.writeStallTimeoutMs,
      ...(config.headers === undefined ? {} : { headers: config.headers }),
      ...(config.forwardHeaders === undefined ? {} : { forwardHeaders: config.forwardHeaders }),
    })
    return { config, whole, answerDecides: asked === undefined, gate }
  } catch (error) {
    // Answered through the sink by `relay()`, which then rejects with it.
    return { refused: error }
  }
}

/**
 * The pre-commit deadline: its signal, what waits listen to (the stop and the deadline; a real
 * `AbortSignal`, since a key pool is handed it), and `release` (clears its timer and
 * listeners). Without a budget there is nothing to watch: waits follow the stop alone. Either
 * way the waits' `AbortSignal` is made only when a request does wait (most never do).
 */
function watchDeadline(
  deadlineMs: number,
  stop: SignalLike,
): { deadline: AbortSignal; waits: () => AbortSignal; release(): void } {
  if (!Number.isFinite(deadlineMs)) {
    return { deadline: neverAborted, waits: () => realSignal(stop), release() {} }
  }
  const deadline = new AbortController()
  let waits: ReturnType<typeof followSignals> | undefined
  // Request-scoped: it holds the process while the request waits, and is always cleared.
  const timer = setTimeout(
    () => deadline.abort(new StreamTimeoutError('deadline', deadlineMs)),
    deadlineMs,
  )
  return {
    deadline: deadline.signal,
    waits: () => {
      waits ??= followSignals([stop, deadline.signal])
      return waits.controller.signal
    },
    release() {
      clearTimeout(timer)
      waits?.release()
    },
  }
}

/**
 * Relays one streaming request: attempts over the key pool (and the fallback routes) while
 * nothing has reached the client, commits the first attempt with output, and pumps it to an
 * honest end. When every attempt fails before commit, the client gets a real status (502 for
 * upstream faults, 504 for timeouts, 429 with `retry-after` when every key is rate limited,
 * 503 when every key is busy, the upstream's own 4xx for a rejected request) with a JSON body
 * in the protocol's shape, or, with early headers, the protocol's in-band error frame.
 *
 * Options are validated before anything is leased: a bad one rejects with a `RangeError` or
 * `TypeError` naming it.
 *
 * @example
 * const read = await readClientRequest(request, { adapter: openaiChat })
 * if (!read.ok) return read.response // 400 or 413 in the client's protocol
 * const { sink, response } = webSink()
 * void relay({
 *   sink,
 *   pool,
 *   adapter: openaiChat,
 *   request: { url: upstreamUrl, body: read.body },
 *   // Sends each attempt's own request (retries, fallbacks, continuations) with its key.
 *   attempt: fetchAttempt({ clientHeaders: request.headers }),
 *   policy: { maxAttempts: 3, deadlineMs: 30_000, peek: { firstOutputTimeoutMs: 20_000 } },
 * })
 * return response
 *
 * @group Relay
 */
export function relay(
  options: RelayRequestOptions & {
    readonly request: UpstreamRequest
    readonly pool: KeyPool
    readonly attempt: AttemptFunction<AttemptRequest>
  },
): Promise<RelayOutcome>
/** With a `request` and no `pool`: `context.request` is that request, never `undefined`. */
export function relay(
  options: RelayRequestOptions & {
    readonly request: UpstreamRequest
    readonly pool?: undefined
    readonly attempt: CallerCredentialsAttemptFunction<AttemptRequest>
  },
): Promise<RelayOutcome>
/** With a `pool`, with or without a `request`. */
export function relay(
  options: RelayRequestOptions & { readonly pool: KeyPool; readonly attempt: AttemptFunction },
): Promise<RelayOutcome>
/** Without a `pool`: each attempt sets the caller's own credential (`key: undefined`). */
export function relay(
  options: RelayRequestOptions & {
    readonly pool?: undefined
    readonly attempt: CallerCredentialsAttemptFunction
  },
): Promise<RelayOutcome>
/** Either form, when whether a `pool` is given is only known at run time. */
export function relay(options: RelayOptions): Promise<RelayOutcome>
export async function relay(given: RelayOptions | RelayOptionsWithRequest): Promise<RelayOutcome> {
  // The attempt is called with `request` whenever one was given: the overloads' promise.
  const options = given as RelayOptions
  const prepared = prepare(options)
  if ('refused' in prepared) {
    // The sink may own the response already (a hijacked Fastify reply): the client is told.
    await answerRefusedOptions(options, prepared.refused)
    throw prepared.refused
  }
  const { config, whole, answerDecides, gate } = prepared
  const started = now()
  if (config.hedge !== undefined && config.priority !== 'background' && !whole)
    countRequest(config.hedge)
  // What stops the request: the client leaving (the gate's stop) or the host's signal. With
  // no host signal it is the gate's own. Only the library listens to it: no `AbortSignal` is
  // made for it (each costs on every request).
  const gone = stopOf(gate)
  const both = options.signal === undefined ? undefined : followStops([gone, options.signal])
  const stop = both?.controller ?? gone
  const { deadline, waits, release } = watchDeadline(config.deadlineMs, stop)
  // The host's adapters and translator are guarded: a throw names its component.
  const adapter = guardAdapter(options.adapter)
  const routes: Route[] = [
    {
      name: options.name ?? 'primary',
      adapter,
      ...(options.pool === undefined
        ? { attempt: options.attempt }
        : { pool: options.pool, attempt: options.attempt }),
    } as Route,
    ...(options.policy?.routes ?? []).map((route) => ({
      ...route,
      adapter: guardAdapter(route.adapter),
    })),
  ]
  const run: Run = {
    options: { ...options, adapter },
    config: guarded(config),
    hooks: options.hooks ?? {},
    gate,
    routes,
    attempts: [],
    whole,
    answerDecides,
    secrets: [...(options.secrets ?? [])],
    stop,
    deadline,
    get waits() {
      return waits()
    },
    started,
    deadlineAt: started + config.deadlineMs,
    attemptNumber: 0,
    last: undefined,
    freshConnection: false,
    gaveUp: false,
    hedges: undefined,
  }
  // What every outcome says of the request: its protocol and the model it asked for.
  const model = requestedModel(options.request?.url, options.request?.body)
  // Read from the guarded copy: a plain value there, whatever the host's adapter does.
  const protocol = adapter.name
  // Nothing more goes to a client that left (or whose host gave up): a response still
  // waiting on its head settles (a `webSink()` response rejects with the reason, as `fetch`
  // does on an abort) instead of hanging.
  const clientGone = (): RelayOutcome => {
    gate.abort(run.stop.aborted ? run.stop.reason : gate.failure)
    return finish({ kind: 'client-gone', attempts: run.attempts, durationMs: now() - started })
  }
  const finish = (ended: EngineOutcome): RelayOutcome => {
    // `ok` follows from `kind` and `end`, which the compiler cannot pair up across the union.
    const outcome = {
      ...ended,
      ok: isCompleteAnswer(ended),
      result: resultOf(ended),
      protocol,
      ...(model === undefined ? {} : { model }),
    } as RelayOutcome
    callHook(run.hooks.onOutcome, outcome)
    return outcome
  }
  try {
    let end: RouteEnd = { kind: 'give-up', verdict: deadlineVerdict(undefined) }
    let endedOn: Route | undefined
    for (const [index, route] of routes.entries()) {
      endedOn = route
      end = await runRoute(run, {
        route,
        name: route.name ?? `route-${index + 1}`,
        hasNextRoute: index < routes.length - 1,
        progress: initialRouteProgress(route.request ?? options.request),
      })
      if (end.kind !== 'next-route') break
    }
    if (end.kind === 'committed') return finish(end.outcome)
    if (end.kind === 'client-gone' || run.stop.aborted) return clientGone()
    const verdict =
      end.kind === 'give-up' ? end.verdict : (run.last?.verdict ?? deadlineVerdict(undefined))
    return finish(await giveUp(run, verdict, keysBackAfter(verdict, endedOn?.pool)))
  } catch (error) {
    // A downstream failure surfaced as a throw (a sink method, the gate): the client is gone.
    if (gate.failure !== undefined || run.stop.aborted) return clientGone()
    // Anything else is code that threw (the host's, or a bug): the client still gets an end.
    return finish(await giveUpAfterThrow(run, error))
  } finally {
    release()
    both?.release()
  }
}
