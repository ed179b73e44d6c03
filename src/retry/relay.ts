/**
 * `relay()`: the call a gateway makes per request. Attempts run over a key pool inside the
 * pre-output window; the first attempt with output commits and is pumped to its end; after
 * that nothing is ever retried. What to do after each failure is decided by the pure
 * `decideNext` and `planKeyWait` (`decide.ts`); one attempt is `runAttempt` (`attempt.ts`);
 * this module keeps the loop, the hooks and the outcome.
 *
 * @module
 */

import type { EofClass } from '../classify/index.js'
import { type CommitGate, createCommitGate, type DownstreamSink } from '../commit/gate.js'
import { failBeforeContent, type PumpEnd, type StallStats } from '../commit/pump.js'
import { isStreamBoundaryError, StreamTimeoutError } from '../errors.js'
import type { KeyLease, KeyPool } from '../key-pool/types.js'
import { parseObject } from '../protocols/common.js'
import type { RenderableError, StreamAdapter, UpstreamRequest } from '../protocols/types.js'
import {
  type AttemptFunction,
  type AttemptResult,
  type CallerCredentialsAttemptFunction,
  type Credentials,
  type Route,
  runAttempt,
  type UpstreamHttpError,
} from './attempt.js'
import type { FailureVerdict } from './classify.js'
import { fitContextWindow } from './context-window.js'
import {
  type Decision,
  deadlineVerdict,
  decideNext,
  type NotLeased,
  planKeyWait,
} from './decide.js'
import { type NormalizedRelayPolicy, normalizeRelayPolicy, type RelayPolicy } from './policy.js'
import { sleep } from './sleep.js'

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
  AdjustRequestContext,
  BackoffOptions,
  RelayPolicy,
  RetryOnContext,
} from './policy.js'
export { relayDefaults } from './policy.js'

/** One attempt, as reported in outcomes and hooks. Never holds a secret. */
export interface AttemptRecord {
  readonly attemptNumber: number
  readonly route: string
  readonly keyId: string | null
  /** `stream`, or `non-streaming` for the fallback. */
  readonly mode: 'stream' | 'non-streaming'
  /** The attempt's correlation id, when sent. */
  readonly requestId: string | undefined
  /** The upstream's HTTP status, when it answered. */
  readonly status: number | null
  /** `committed`, or the failure reason (`empty-stream`, `status-429`, `first-output-timeout`…). */
  readonly result: string
  readonly retry: boolean
  readonly durationMs: number
}

/** How a relayed request ended. A discriminated union on `kind`. */
export type RelayOutcome =
  | {
      readonly kind: 'committed'
      readonly attempts: readonly AttemptRecord[]
      readonly route: string
      readonly keyId: string | null
      /** `non-streaming` when the answer came from the non-streaming fallback. */
      readonly mode: 'stream' | 'non-streaming'
      /** From the start of the request to the first output. */
      readonly timeToFirstOutputMs: number
      readonly end: PumpEnd
      readonly eof: EofClass | null
      readonly bytes: number
      /** Gaps between upstream frames after commit longer than the stall threshold. */
      readonly stalls: StallStats
      readonly durationMs: number
    }
  | {
      readonly kind: 'failed'
      readonly attempts: readonly AttemptRecord[]
      /** The status the client got (or the in-band error's status with early headers). */
      readonly status: number
      readonly error: RenderableError
      readonly reason: string
      readonly retryAfterMs: number | undefined
      readonly durationMs: number
    }
  | {
      readonly kind: 'client-gone'
      readonly attempts: readonly AttemptRecord[]
      readonly durationMs: number
    }

/** Hooks, each given a frozen context. A hook that throws is ignored. */
export interface RelayHooks {
  /** An attempt starts, with the key it leased. */
  onAttempt?(context: {
    readonly attemptNumber: number
    readonly route: string
    readonly keyId: string | null
    readonly mode: 'stream' | 'non-streaming'
    readonly requestId: string | undefined
  }): void
  /**
   * A failed attempt is followed by another, once its key is leased: why the last one failed
   * and how long the wait for the next key took.
   */
  onRetry?(context: {
    readonly attemptNumber: number
    readonly reason: string
    readonly delayMs: number
    readonly nextKeyId: string | null
    readonly route: string
  }): void
  /** The first output arrived and the attempt commits, before anything is written. */
  onCommit?(context: {
    readonly attemptNumber: number
    readonly route: string
    readonly keyId: string | null
    readonly timeToFirstOutputMs: number
  }): void
  /** Every attempt failed before commit; the client gets `status`. */
  onGiveUp?(context: {
    readonly status: number
    readonly reason: string
    readonly attempts: readonly AttemptRecord[]
  }): void
  /** The request is over: the outcome `relay()` resolves to. */
  onOutcome?(outcome: RelayOutcome): void
}

/**
 * Options of {@link relay}. Credentials come from a `pool` (the attempt function gets a
 * leased key) or from the caller (no `pool`: the attempt function sets its own).
 */
export type RelayOptions = RelayRequestOptions & Credentials

/** Options of {@link relay} besides the credentials. */
export interface RelayRequestOptions {
  /** Where the response goes (`webSink().sink`, `nodeSink(res)`). */
  readonly sink: DownstreamSink
  readonly adapter: StreamAdapter
  /** The first route's name. @default 'primary' */
  readonly name?: string
  readonly policy?: RelayPolicy
  /** The host's signal (the client request's), if it has one besides the sink's. */
  readonly signal?: AbortSignal | undefined
  readonly hooks?: RelayHooks
  /**
   * The request's JSON body (and URL), when the relay may rewrite it: for `adjustRequest`,
   * `fitContextWindow` and the non-streaming fallback. Attempts get it as `context.request`.
   */
  readonly request?: UpstreamRequest
}

const now = (): number => performance.now()

function callHook<T>(hook: ((context: T) => void) | undefined, context: T): void {
  if (hook === undefined) return
  try {
    hook(Object.freeze(context))
  } catch {
    // A hook must never break the request it observes.
  }
}

/** One request's shared state: what every route and attempt of it reads and adds to. */
interface Run {
  readonly options: RelayOptions
  readonly config: NormalizedRelayPolicy
  readonly hooks: RelayHooks
  readonly gate: CommitGate
  readonly routes: readonly Route[]
  readonly attempts: AttemptRecord[]
  /** Aborts when the client is gone or the host gave up. */
  readonly stop: AbortSignal
  /** Aborts when the pre-commit budget ran out. */
  readonly deadline: AbortSignal
  /** Aborts on either: what waits for a key listen to. */
  readonly waits: AbortSignal
  readonly started: number
  readonly deadlineAt: number
  attemptNumber: number
  last:
    | {
        verdict: FailureVerdict
        adapter: StreamAdapter
        /** The upstream's HTTP error, passed on as it was when this verdict ends the request. */
        upstream: UpstreamHttpError | undefined
        /** Whether the key came from a pool (its 401/403 is the gateway's, not the client's). */
        pooled: boolean
      }
    | undefined
  /** The previous attempt died of a reset or broken pipe before any response. */
  freshConnection: boolean
}

/** How a route ended. */
type RouteEnd =
  | { readonly kind: 'committed'; readonly outcome: RelayOutcome }
  | { readonly kind: 'next-route' }
  | { readonly kind: 'give-up'; readonly verdict: FailureVerdict }
  | { readonly kind: 'client-gone' }

/** One route's mutable state. */
interface RouteRun {
  readonly route: Route
  readonly name: string
  readonly hasNextRoute: boolean
  readonly tried: Set<string>
  request: UpstreamRequest | undefined
  streamAttempts: number
  overloads: number
  reuses: number
  /** When tried keys may be reused (after the backoff), in `now()` time. */
  reuseAt: number
  fallbackUsed: boolean
  fitted: boolean
  /** Why the previous attempt failed, told to `onRetry` once the next key is leased. */
  retryReason: string | undefined
}

/**
 * Leases the key usable soonest: a free untried key now; else a free tried key after its
 * backoff; else waits for the earliest cooling key's cooldown end or a busy key's release,
 * within the deadline and `maxWaitMs`. A give-up says why no key could be had.
 */
async function leaseNext(
  run: Run,
  route: RouteRun,
): Promise<Leased | { kind: 'give-up'; verdict: FailureVerdict }> {
  const pool = route.route.pool
  if (pool === undefined) return callerCredentials(run, route)
  const waitStarted = now()
  for (;;) {
    const untried = await pool.acquire({ exclude: route.tried })
    if (untried.kind === 'leased') return untried
    let all: NotLeased | undefined
    if (route.tried.size > 0) {
      const any = await pool.acquire()
      if (any.kind === 'leased') return backOff(run, route, any.lease)
      all = any
    }
    const plan = planKeyWait({
      untried,
      all,
      budgetMs: Math.min(run.deadlineAt - now(), run.config.maxWaitMs - (now() - waitStarted)),
      priority: run.config.priority,
      last: run.last?.verdict,
    })
    if (plan.kind === 'give-up') return plan
    if (plan.kind === 'sleep') {
      await sleep(plan.ms, run.waits)
      continue
    }
    const woken = await pool.acquire({
      exclude: plan.includeTried ? undefined : route.tried,
      waitMs: plan.ms,
      signal: run.waits,
    })
    if (woken.kind === 'leased') {
      return route.tried.has(woken.lease.keyId) ? backOff(run, route, woken.lease) : woken
    }
  }
}

type Leased = { kind: 'leased'; lease: KeyLease | undefined }

/** Without a pool every attempt reuses the caller's credentials: after the backoff or `Retry-After`. */
async function callerCredentials(
  run: Run,
  route: RouteRun,
): Promise<Leased | { kind: 'give-up'; verdict: FailureVerdict }> {
  const wait = Math.max(0, route.reuseAt - now())
  if (now() + wait > run.deadlineAt || wait > run.config.maxWaitMs) {
    return { kind: 'give-up', verdict: deadlineVerdict(run.last?.verdict) }
  }
  await sleep(wait, run.waits)
  return { kind: 'leased', lease: undefined }
}

/** A tried key is reused only after its backoff; the lease ends unused if the request does. */
async function backOff(
  run: Run,
  route: RouteRun,
  lease: KeyLease,
): Promise<{ kind: 'leased'; lease: KeyLease } | { kind: 'give-up'; verdict: FailureVerdict }> {
  const wait = Math.max(0, route.reuseAt - now())
  if (now() + wait > run.deadlineAt) {
    await lease.report({ kind: 'cancelled' })
    return { kind: 'give-up', verdict: deadlineVerdict(run.last?.verdict) }
  }
  try {
    await sleep(wait, run.waits)
  } catch (error) {
    await lease.report({ kind: 'cancelled' })
    throw error
  }
  return { kind: 'leased', lease }
}

/** The request to send for an attempt in `mode`. */
function requestFor(route: RouteRun, mode: 'stream' | 'non-streaming') {
  const sent = route.request
  if (sent === undefined) return undefined
  if (mode === 'stream') return { ...sent, stream: true }
  return { ...(route.route.adapter.nonStreamingRequest?.(sent) ?? sent), stream: false }
}

/** Lets `adjustRequest` or the context-window fit change a request the upstream refused. */
function adjustRefused(
  run: Run,
  route: RouteRun,
  verdict: FailureVerdict,
  status: number | null,
): FailureVerdict {
  const request = route.request
  if (verdict.retry || verdict.key.kind !== 'rejected' || request === undefined) return verdict
  let adjusted: UpstreamRequest | undefined
  try {
    const body = run.config.adjustRequest?.(
      Object.freeze({
        attemptNumber: run.attemptNumber,
        route: route.name,
        status,
        error: verdict.error,
        request,
      }),
    )
    if (body !== undefined) adjusted = { url: request.url, body }
  } catch {
    // A throwing hook keeps the refusal as it is.
  }
  if (adjusted === undefined && run.config.fit !== undefined && !route.fitted) {
    route.fitted = true
    adjusted = fitContextWindow(route.route.adapter, request, verdict.error.message, run.config.fit)
  }
  if (adjusted === undefined) return verdict
  route.request = adjusted
  return { ...verdict, retry: true, reason: `${verdict.reason}:request-adjusted` }
}

/** Runs one attempt on a leased key and records it. */
async function attemptOn(
  run: Run,
  route: RouteRun,
  lease: KeyLease | undefined,
  mode: 'stream' | 'non-streaming',
): Promise<AttemptResult> {
  const number = ++run.attemptNumber
  const keyId = lease?.keyId ?? null
  if (keyId !== null) route.tried.add(keyId)
  if (mode === 'stream') route.streamAttempts++
  const requestId = run.config.correlationIds ? globalThis.crypto.randomUUID() : undefined
  const attemptStarted = now()
  callHook(run.hooks.onAttempt, {
    attemptNumber: number,
    route: route.name,
    keyId,
    mode,
    requestId,
  })
  const freshConnection = run.freshConnection
  run.freshConnection = false
  let timeToFirstOutputMs = 0
  const result = await runAttempt({
    route: route.route,
    routeName: route.name,
    attemptNumber: number,
    mode,
    lease,
    request: requestFor(route, mode),
    requestId,
    freshConnection,
    gate: run.gate,
    policy: run.config,
    stop: run.stop,
    deadline: run.deadline,
    budgetMs: run.deadlineAt - now(),
    onCommit: () => {
      timeToFirstOutputMs = now() - run.started
      callHook(run.hooks.onCommit, {
        attemptNumber: number,
        route: route.name,
        keyId,
        timeToFirstOutputMs,
      })
    },
  })
  run.attempts.push({
    attemptNumber: number,
    route: route.name,
    keyId,
    mode,
    requestId,
    status: result.status,
    result: result.kind === 'committed' ? 'committed' : result.verdict.reason,
    retry: result.kind === 'failed' && result.verdict.retry,
    durationMs: now() - attemptStarted,
  })
  if (result.kind === 'committed') {
    committedAt.set(result, { keyId, timeToFirstOutputMs })
  }
  return result
}

const committedAt = new WeakMap<
  AttemptResult,
  { keyId: string | null; timeToFirstOutputMs: number }
>()

/** What follows a failed attempt on this route, with the route's state brought up to date. */
function afterFailure(
  run: Run,
  route: RouteRun,
  result: Extract<AttemptResult, { kind: 'failed' }>,
  mode: 'stream' | 'non-streaming',
): Decision {
  let verdict =
    mode === 'stream' ? adjustRefused(run, route, result.verdict, result.status) : result.verdict
  if (result.stopped === 'deadline') verdict = deadlineVerdict(run.last?.verdict)
  if (result.stopped === undefined) {
    run.last = {
      verdict,
      adapter: route.route.adapter,
      upstream: result.upstream,
      pooled: route.route.pool !== undefined,
    }
  }
  route.overloads = verdict.overload ? route.overloads + 1 : 0
  run.freshConnection = /^connection-(?:ECONNRESET|EPIPE|UND_ERR_SOCKET)$/.test(verdict.reason)
  const decision = decideNext(
    {
      attempts: route.streamAttempts,
      maxAttempts: run.config.maxAttempts,
      overloads: route.overloads,
      overloadFallbackAfter: run.config.overloadFallbackAfter,
      priority: run.config.priority,
      hasNextRoute: route.hasNextRoute,
      fallbackAvailable:
        !route.fallbackUsed &&
        run.config.fallbackTimeoutMs !== undefined &&
        route.request !== undefined &&
        route.route.adapter.nonStreamingRequest !== undefined &&
        route.route.adapter.renderFromMessage !== undefined,
      mode,
      reuses: route.reuses,
      stopped: run.stop.aborted
        ? 'client-gone'
        : (result.stopped ?? (run.deadline.aborted ? 'deadline' : undefined)),
    },
    run.deadline.aborted && result.stopped === undefined ? deadlineVerdict(verdict) : verdict,
    run.config.backoff,
  )
  // The record says what was decided: an adjusted request is a new reason, and a retry.
  const index = run.attempts.length - 1
  const record = run.attempts[index]
  if (record !== undefined) {
    run.attempts[index] = {
      ...record,
      result: verdict.reason,
      retry: decision.kind === 'retry' || decision.kind === 'fallback',
    }
  }
  if (decision.kind === 'retry') {
    route.reuses++
    // The caller's one credential waits out what the upstream asked for, too.
    const asked = route.route.pool === undefined ? (verdict.retryAfterMs ?? 0) : 0
    route.reuseAt = now() + Math.max(decision.reuseDelayMs, asked)
    route.retryReason = verdict.reason
  }
  return decision
}

/** The route's attempts: stream attempts, then perhaps the non-streaming fallback. */
async function runRoute(run: Run, route: RouteRun): Promise<RouteEnd> {
  let mode: 'stream' | 'non-streaming' = 'stream'
  for (;;) {
    if (run.stop.aborted) return { kind: 'client-gone' }
    const waitStarted = now()
    let leased: Awaited<ReturnType<typeof leaseNext>>
    try {
      leased = await leaseNext(run, route)
    } catch (error) {
      // A wait ended by the client leaving or the deadline: nothing was leased.
      if (run.stop.aborted) return { kind: 'client-gone' }
      if (run.deadline.aborted)
        return { kind: 'give-up', verdict: deadlineVerdict(run.last?.verdict) }
      throw error
    }
    if (leased.kind === 'give-up') return leased
    if (route.retryReason !== undefined) {
      callHook(run.hooks.onRetry, {
        attemptNumber: run.attemptNumber + 1,
        reason: route.retryReason,
        delayMs: Math.round(now() - waitStarted),
        nextKeyId: leased.lease?.keyId ?? null,
        route: route.name,
      })
      route.retryReason = undefined
    }
    const result = await attemptOn(run, route, leased.lease, mode)
    if (result.kind === 'committed') {
      const at = committedAt.get(result) as { keyId: string | null; timeToFirstOutputMs: number }
      return {
        kind: 'committed',
        outcome: {
          kind: 'committed',
          attempts: run.attempts,
          route: route.name,
          keyId: at.keyId,
          mode,
          timeToFirstOutputMs: at.timeToFirstOutputMs,
          end: result.end,
          eof: result.eof,
          bytes: result.bytes,
          stalls: result.stalls,
          durationMs: now() - run.started,
        },
      }
    }
    const decision = afterFailure(run, route, result, mode)
    switch (decision.kind) {
      case 'retry':
        mode = 'stream'
        break
      case 'fallback':
        route.fallbackUsed = true
        route.retryReason = result.verdict.reason
        mode = 'non-streaming'
        break
      default:
        return decision
    }
  }
}

/** Headers of an upstream error that identify the request or say when to come back. */
const passedHeaders =
  /^(?:content-type|retry-after(?:-ms)?|x-request-id|request-id|[\w-]*-request-id)$/i

/** The upstream's own error, when it is the one the client should get as it was. */
function passThrough(run: Run, verdict: FailureVerdict): UpstreamHttpError | undefined {
  const last = run.last
  if (!run.config.passThroughErrors || last === undefined || last.verdict !== verdict)
    return undefined
  if (last.pooled && verdict.key.kind === 'auth-failed') return undefined
  if (run.gate.state !== 'open' || last.upstream === undefined) return undefined
  // Only an error in a JSON shape goes out as it was; an HTML or text page from a proxy is
  // rendered in the protocol's shape (its title as the message) so clients can parse it.
  return parseObject(last.upstream.body.trim()) === undefined ? undefined : last.upstream
}

/** Ends a request that failed before content: a real status, or in-band with early headers. */
async function giveUp(run: Run, verdict: FailureVerdict): Promise<RelayOutcome> {
  const client = run.config.downstream.adapter
  const adapter = client ?? run.last?.adapter ?? run.options.adapter
  const retryAfterMs = verdict.retryAfterMs
  // An upstream body in another protocol than the client's is rendered in the client's.
  const upstream =
    client === undefined || client === run.last?.adapter ? passThrough(run, verdict) : undefined
  const headers = new Headers()
  for (const [name, value] of upstream?.headers ?? []) {
    if (passedHeaders.test(name)) headers.set(name, value)
  }
  const waitingHelps =
    retryAfterMs !== undefined &&
    (verdict.status === 429 || verdict.status === 503 || verdict.status === 529)
  if (waitingHelps) headers.set('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))))
  // The library spent its retries: SDKs that honour this header do not stack theirs on top.
  else headers.set('x-should-retry', 'false')
  const status = upstream?.status ?? verdict.status
  callHook(run.hooks.onGiveUp, {
    status,
    reason: verdict.reason,
    attempts: run.attempts,
  })
  try {
    if (upstream !== undefined) {
      if (!headers.has('content-type')) headers.set('content-type', 'application/json')
      await run.gate.respond(status, upstream.body, headers)
    } else {
      await failBeforeContent(
        run.gate,
        adapter,
        verdict.status,
        { ...verdict.error, status: verdict.status },
        headers,
      )
    }
  } catch (error) {
    if (!isStreamBoundaryError(error)) throw error
    return { kind: 'client-gone', attempts: run.attempts, durationMs: now() - run.started }
  }
  return {
    kind: 'failed',
    attempts: run.attempts,
    status,
    error: verdict.error,
    reason: verdict.reason,
    retryAfterMs,
    durationMs: now() - run.started,
  }
}

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

/** Aborts `controller` when any of `signals` aborts; returns the listeners' removal. */
function follow(controller: AbortController, signals: readonly (AbortSignal | undefined)[]) {
  const listeners: [AbortSignal, () => void][] = []
  for (const signal of signals) {
    if (signal === undefined) continue
    const listener = () => controller.abort(signal.reason)
    if (signal.aborted) listener()
    else {
      signal.addEventListener('abort', listener, { once: true })
      listeners.push([signal, listener])
    }
  }
  return () => {
    for (const [signal, listener] of listeners) signal.removeEventListener('abort', listener)
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
  const stop = new AbortController()
  const deadline = new AbortController()
  const waits = new AbortController()
  const unfollow = [
    follow(stop, [gate.signal, options.signal]),
    follow(waits, [stop.signal, deadline.signal]),
  ]
  // Request-scoped: it holds the process while the request waits, and is always cleared.
  const deadlineTimer = Number.isFinite(config.deadlineMs)
    ? setTimeout(
        () => deadline.abort(new StreamTimeoutError('deadline', config.deadlineMs)),
        config.deadlineMs,
      )
    : undefined
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
    stop: stop.signal,
    deadline: deadline.signal,
    waits: waits.signal,
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
    if (deadlineTimer !== undefined) clearTimeout(deadlineTimer)
    for (const remove of unfollow) remove()
  }
}
