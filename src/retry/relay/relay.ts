import { now } from '../../call-safely.js'
import { commitGateOn } from '../../commit/gate.js'
import type { CommitGate } from '../../commit/gate-options.js'
import { StreamTimeoutError } from '../../errors.js'
import { followSignals, followStops } from '../../follow-signals.js'
import type { KeyPool } from '../../key-pool/types.js'
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
  type RelayOptions,
  type RelayOutcome,
  type RelayRequestOptions,
  resultOf,
} from '../shared/outcome.js'
import {
  checkCall,
  checkSetup,
  compileRelay,
  mergeHooks,
  primaryRoute,
  type RelayCall,
  type RelayPlan,
  relayKeys,
} from './compile.js'
import { answerRefusedOptions, giveUp, giveUpAfterThrow } from './give-up.js'

/**
 * Whether the client asked for a stream: the `stream` option, else what `request` says in the
 * adapter's terms; `undefined` when it says nothing (no `stream` in the body, a URL that is
 * not a streaming one): then the answer decides (an event stream is relayed as one).
 */
function asksForStream(call: RelayCall, adapter: StreamAdapter): boolean | undefined {
  if (call.stream !== undefined) return call.stream
  const request = call.request
  if (request === undefined) return true
  if (request.body.stream === true || urlAsksForStream(adapter, request.url)) return true
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

/**
 * What a request of a built relay needs besides the plan: whether it is whole, and its gate.
 * A bad combination of the request and the plan (a non-streaming request through a stream
 * translator: `plan.wholeRefusal`) is returned (`refused`) before anything is leased; the
 * caller answers the client through the sink (`answerRefusedOptions`) and rejects with it, so
 * a response waiting on the sink settles instead of hanging or being cut.
 */
function prepare(
  plan: RelayPlan,
  call: RelayCall,
): { whole: boolean; answerDecides: boolean; gate: CommitGate } | { refused: unknown } {
  try {
    // The adapter's `isStreamingRequest` is the host's code: a throw from it names it.
    const asked = asksForStream(call, plan.adapter)
    const whole = asked !== true
    // Worked out when the relay was built: what a non-streaming request cannot go through.
    if (whole && plan.wholeRefusal !== undefined) throw new TypeError(plan.wholeRefusal)
    const { gates } = plan.config
    const gate = commitGateOn(call.sink, whole ? gates.whole : gates.stream)
    return { whole, answerDecides: asked === undefined, gate }
  } catch (error) {
    return { refused: error }
  }
}

/** What a refused request is answered with: its sink, and the relay's adapters and secrets. */
export function refusalOf(plan: RelayPlan, call: RelayCall) {
  return {
    sink: call.sink,
    adapter: plan.given.adapter,
    policy: { downstream: { adapter: plan.given.client } },
    secrets: call.secrets,
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
 * `TypeError` naming it (after the client was answered a `500` through the sink). `relay()`
 * checks every option on every call; {@link createRelay} builds the same relay once per
 * endpoint, and its requests check nothing again.
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
export function relay(given: RelayOptions | RelayOptionsWithRequest): Promise<RelayOutcome> {
  // The attempt is called with `request` whenever one was given: the overloads' promise.
  const options = given as RelayOptions
  let plan: RelayPlan
  try {
    checkSetup('relay', options, relayKeys)
    checkCall(options)
    plan = compileRelay(options)
  } catch (error) {
    // The sink may own the response already (a hijacked Fastify reply): the client is told.
    return refuseOptions(options, error)
  }
  // The relay's hooks and attempt function are the plan's: the request brings the rest.
  const { sink, request, signal, secrets, stream } = options
  return runRelay(plan, { sink, request, signal, secrets, stream })
}

/** Answers the client for options that failed their check, then rejects with the failure. */
async function refuseOptions(options: RelayOptions, error: unknown): Promise<never> {
  await answerRefusedOptions(options, error)
  throw error
}

/**
 * A request's run: its routes (built with the relay when it has its attempt function; else
 * with the request's), what stops it (the client leaving, the host's signal), its deadline,
 * and `release` (clears the deadline's timer and every listener).
 */
function openRun(
  plan: RelayPlan,
  call: RelayCall,
  prepared: { whole: boolean; answerDecides: boolean; gate: CommitGate },
): { run: Run; routes: readonly Route[]; release(): void } {
  const { config, adapter } = plan
  const { whole, answerDecides, gate } = prepared
  const started = now()
  if (config.hedge !== undefined && config.priority !== 'background' && !whole)
    countRequest(config.hedge)
  // What stops the request: the client leaving (the gate's stop) or the host's signal. With
  // no host signal it is the gate's own. Only the library listens to it: no `AbortSignal` is
  // made for it (each costs on every request).
  const gone = stopOf(gate)
  const both = call.signal === undefined ? undefined : followStops([gone, call.signal])
  const stop = both?.controller ?? gone
  const watched = watchDeadline(config.deadlineMs, stop)
  const { waits } = watched
  const routes: readonly Route[] =
    call.attempt === undefined && plan.routes !== undefined
      ? plan.routes
      : [
          primaryRoute(plan, (call.attempt ?? plan.attempt) as NonNullable<RelayCall['attempt']>),
          ...plan.fallbacks,
        ]
  const run: Run = {
    adapter,
    request: call.request,
    config,
    hooks: mergeHooks(plan.hooks, call.hooks),
    gate,
    routes,
    attempts: [],
    whole,
    answerDecides,
    secrets: call.secrets === undefined ? [] : [...call.secrets],
    stop,
    deadline: watched.deadline,
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
  return {
    run,
    routes,
    release() {
      watched.release()
      both?.release()
    },
  }
}

/**
 * One request of a built relay (its options checked): attempts over its routes, the commit
 * and the outcome. Nothing here checks or defaults an option of the relay (guarantee 30).
 */
export async function runRelay(plan: RelayPlan, call: RelayCall): Promise<RelayOutcome> {
  const prepared = prepare(plan, call)
  if ('refused' in prepared) {
    await answerRefusedOptions(refusalOf(plan, call), prepared.refused)
    throw prepared.refused
  }
  const { gate } = prepared
  const { run, routes, release } = openRun(plan, call, prepared)
  const { adapter } = plan
  const { started } = run
  // What every outcome says of the request: its protocol and the model it asked for.
  const model = requestedModel(call.request?.url, call.request?.body)
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
        progress: initialRouteProgress(route.request ?? call.request),
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
  }
}
