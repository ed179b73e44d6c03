import { createCommitGate } from '../commit/gate.js'
import { StreamTimeoutError } from '../errors.js'
import { followSignals, followStops } from '../follow-signals.js'
import type { KeyPool } from '../key-pool/types.js'
import { realSignal, type SignalLike, stopOf } from '../stop.js'
import type { AttemptFunction, CallerCredentialsAttemptFunction, Route } from './attempt.js'
import { deadlineVerdict } from './decide.js'
import { giveUp } from './give-up.js'
import { countRequest } from './hedge.js'
import type { RelayOptions, RelayOutcome, RelayRequestOptions } from './outcome.js'
import { normalizeRelayPolicy } from './policy.js'
import { runRoute } from './route.js'
import { callHook, neverAborted, now, type RouteEnd, type Run } from './run.js'

export type {
  AttemptContext,
  AttemptContextBase,
  AttemptFunction,
  CallerCredentialsAttemptFunction,
  CallerCredentialsContext,
  Credentials,
  LeasedKey,
  Route,
  UpstreamHttpError,
} from './attempt.js'
export type {
  AttemptRecord,
  RelayHooks,
  RelayOptions,
  RelayOutcome,
  RelayRequestOptions,
} from './outcome.js'
export type {
  AdjustRequestContext,
  BackoffOptions,
  RelayPolicy,
  RetryOnContext,
} from './policy.js'
export { relayDefaults } from './policy.js'

function checkOptions(options: RelayOptions): void {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('relay() needs an options object')
  }
  if (typeof options.attempt !== 'function') throw new TypeError('attempt must be a function')
  if (options.pool !== undefined && typeof options.pool.acquire !== 'function') {
    throw new TypeError('pool must be a KeyPool (or left out when the caller owns the credentials)')
  }
  if (typeof options.adapter?.inspect !== 'function') {
    throw new TypeError('adapter must be a StreamAdapter')
  }
  if (typeof options.sink?.sendHead !== 'function')
    throw new TypeError('sink must be a DownstreamSink')
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
 * const { sink, response } = webSink()
 * void relay({
 *   sink,
 *   pool,
 *   adapter: openaiChat,
 *   attempt: ({ key, signal }) =>
 *     fetch(upstreamUrl, { method: 'POST', body, signal, headers: { authorization: `Bearer ${key.secret}` } }),
 *   policy: { maxAttempts: 3, deadlineMs: 30_000, peek: { firstOutputTimeoutMs: 20_000 } },
 * })
 * return response
 */
export function relay(
  options: RelayRequestOptions & { readonly pool: KeyPool; readonly attempt: AttemptFunction },
): Promise<RelayOutcome>
export function relay(
  options: RelayRequestOptions & {
    readonly pool?: undefined
    readonly attempt: CallerCredentialsAttemptFunction
  },
): Promise<RelayOutcome>
export function relay(options: RelayOptions): Promise<RelayOutcome>
export async function relay(options: RelayOptions): Promise<RelayOutcome> {
  checkOptions(options)
  const config = normalizeRelayPolicy(options.policy)
  for (const route of options.policy?.routes ?? [])
    checkOptions({ ...options, ...route } as RelayOptions)
  const gate = createCommitGate(options.sink, {
    earlyHeaders: config.earlyHeaders,
    keepAliveIntervalMs: config.downstream.keepAlive === false ? 0 : config.keepAliveIntervalMs,
    keepAliveAfterContent: config.downstream.keepAlive === true,
    writeStallTimeoutMs: config.pump.writeStallTimeoutMs,
    ...(config.headers === undefined ? {} : { headers: config.headers }),
    ...(config.forwardHeaders === undefined ? {} : { forwardHeaders: config.forwardHeaders }),
  })
  const started = now()
  if (config.hedge !== undefined && config.priority !== 'background') countRequest(config.hedge)
  // What stops the request: the client leaving (the gate's stop) or the host's signal. With
  // no host signal it is the gate's own. Only the library listens to it: no `AbortSignal` is
  // made for it (each costs on every request).
  const gone = stopOf(gate)
  const both = options.signal === undefined ? undefined : followStops([gone, options.signal])
  const stop = both?.controller ?? gone
  const { deadline, waits, release } = watchDeadline(config.deadlineMs, stop)
  const routes: Route[] = [
    {
      name: options.name ?? 'primary',
      adapter: options.adapter,
      ...(options.pool === undefined
        ? { attempt: options.attempt }
        : { pool: options.pool, attempt: options.attempt }),
    } as Route,
    ...(options.policy?.routes ?? []),
  ]
  const run: Run = {
    options,
    config,
    hooks: options.hooks ?? {},
    gate,
    routes,
    attempts: [],
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
  }
  const finish = (outcome: RelayOutcome): RelayOutcome => {
    callHook(run.hooks.onOutcome, outcome)
    return outcome
  }
  try {
    let end: RouteEnd = { kind: 'give-up', verdict: deadlineVerdict(undefined) }
    for (const [index, route] of routes.entries()) {
      end = await runRoute(run, {
        route,
        name: route.name ?? `route-${index + 1}`,
        hasNextRoute: index < routes.length - 1,
        tried: new Set(),
        request: route.request ?? options.request,
        streamAttempts: 0,
        overloads: 0,
        reuses: 0,
        reuseAt: 0,
        fallbackUsed: false,
        fitted: false,
        retryReason: undefined,
      })
      if (end.kind !== 'next-route') break
    }
    if (end.kind === 'committed') return finish(end.outcome)
    if (end.kind === 'client-gone' || run.stop.aborted) {
      return finish({ kind: 'client-gone', attempts: run.attempts, durationMs: now() - started })
    }
    const verdict =
      end.kind === 'give-up' ? end.verdict : (run.last?.verdict ?? deadlineVerdict(undefined))
    return finish(await giveUp(run, verdict))
  } catch (error) {
    // A downstream failure surfaced as a throw (a sink method, the gate): the client is gone.
    if (gate.failure !== undefined || run.stop.aborted) {
      return finish({ kind: 'client-gone', attempts: run.attempts, durationMs: now() - started })
    }
    throw error
  } finally {
    release()
    both?.release()
  }
}
