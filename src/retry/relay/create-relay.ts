/**
 * `createRelay()`: a relay built once per endpoint. Its options are checked, defaulted and
 * frozen when it is built; each request then brings only what is its own (a sink, the
 * request, a signal, secrets) and nothing is normalised again per request or per attempt
 * (guarantee 30).
 *
 * @module
 */

import type { DownstreamSink } from '../../commit/gate-options.js'
import type { KeyPool } from '../../key-pool/types.js'
import type { StreamAdapter, UpstreamRequest } from '../../protocols/types.js'
import type {
  AttemptFunction,
  AttemptRequest,
  CallerCredentialsAttemptFunction,
} from '../shared/attempt-types.js'
import type { RelayHooks, RelayOutcome } from '../shared/outcome.js'
import type { RelayPolicy } from '../shared/policy-types.js'
import {
  checkRelayCall,
  checkSetup,
  compileRelay,
  type RelayCall,
  type RelayPlan,
  type RelaySetup,
} from './compile.js'
import { answerRefusedOptions } from './give-up.js'
import { refusalOf, runRelay } from './relay.js'

/**
 * Options of {@link createRelay}: what an endpoint fixes once. Credentials come from a `pool`
 * (attempts get a leased key) or from the caller (no `pool`). The attempt function may be
 * given here, or per request (a gateway that builds `fetchAttempt({ clientHeaders })` from
 * each client's headers), or both (the request's wins).
 *
 * @group Relay
 */
export interface CreateRelayOptions {
  /** Keys to lease, one per attempt; leave it out when each attempt sets its own credential. */
  readonly pool?: KeyPool | undefined
  /** The upstream's protocol. */
  readonly adapter: StreamAdapter
  /** The primary route's attempt function (a request may bring its own). */
  readonly attempt?:
    | AttemptFunction<AttemptRequest>
    | CallerCredentialsAttemptFunction<AttemptRequest>
    | undefined
  /** How requests are retried and ended, as `relay()` takes it: checked once, here. */
  readonly policy?: RelayPolicy | undefined
  /** Hooks for every request; a request's own hooks are called after these. */
  readonly hooks?: RelayHooks | undefined
  /** The first route's name. @default 'primary' */
  readonly name?: string | undefined
}

/**
 * What each request gives a relay built by {@link createRelay}: `relay()`'s per-request
 * options. `Attempt` is the attempt function's type (with a pool's key or without).
 *
 * @group Relay
 */
export interface RelayCallOptions<Attempt = AttemptFunction | CallerCredentialsAttemptFunction> {
  /** Where the response goes (`webSink().sink`, `nodeSink(res)`). */
  readonly sink: DownstreamSink
  /** The request's JSON body and URL (see `relay()`'s `request`). */
  readonly request?: UpstreamRequest | undefined
  /** The host's signal (the client request's), if it has one besides the sink's. */
  readonly signal?: AbortSignal | undefined
  /** Credentials put on attempts besides leased keys, redacted by value (see `relay()`). */
  readonly secrets?: readonly string[] | undefined
  /** Whether the client asked for a stream (see `relay()`'s `stream`). */
  readonly stream?: boolean | undefined
  /** This request's attempt function, in place of the relay's (only checked to be one). */
  readonly attempt?: Attempt | undefined
  /** This request's hooks, called after the relay's (a throw from either is ignored). */
  readonly hooks?: RelayHooks | undefined
}

/**
 * A relay built by {@link createRelay}: call it once per request. With a `request`, attempt
 * functions given per request get `context.request` defined; a relay built with an attempt
 * function that needs it (`RequestRequired`) takes only requests that carry one.
 *
 * @group Relay
 */
export interface CompiledRelay<
  Pooled extends boolean = boolean,
  RequestRequired extends boolean = false,
> {
  (
    options: RelayCallOptions<
      Pooled extends true
        ? AttemptFunction<AttemptRequest>
        : CallerCredentialsAttemptFunction<AttemptRequest>
    > & {
      readonly request: UpstreamRequest
    },
  ): Promise<RelayOutcome>
  (
    options: RequestRequired extends true
      ? never
      : RelayCallOptions<
          Pooled extends true
            ? AttemptFunction<AttemptRequest | undefined>
            : CallerCredentialsAttemptFunction<AttemptRequest | undefined>
        >,
  ): Promise<RelayOutcome>
}

/** Every option of {@link createRelay}. */
const setupKeys = Object.keys({
  pool: true,
  adapter: true,
  attempt: true,
  policy: true,
  hooks: true,
  name: true,
} satisfies Record<keyof CreateRelayOptions, true>)

/** What a request brings, named when it is given to `createRelay` instead. */
const perRequestKeys = ['sink', 'request', 'signal', 'secrets', 'stream']

function rejectPerRequestOptions(options: CreateRelayOptions): void {
  if (typeof options !== 'object' || options === null) return
  const misplaced = perRequestKeys.find((key) => key in options)
  if (misplaced === undefined) return
  throw new TypeError(
    `createRelay: "${misplaced}" belongs to each request: pass it to the function createRelay() returns`,
  )
}

/** A request refused before anything was leased: the client is told, then the call rejects. */
async function refuse(plan: RelayPlan, call: unknown, error: unknown): Promise<never> {
  const given = (typeof call === 'object' && call !== null ? call : {}) as RelayCall
  await answerRefusedOptions(refusalOf(plan, given), error)
  throw error
}

/**
 * Builds a relay once per endpoint: the pool, adapter, attempt function, policy (its routes,
 * hedging, continuation, fallback, context-window fit), hooks and name are checked, defaulted,
 * guarded and frozen now, and a bad one throws here with `relay()`'s message (a `TypeError` or
 * `RangeError` naming it). The function returned relays one request each time it is called,
 * as `relay()` does, given only what belongs to the request: its sink, request, signal,
 * secrets and `stream`, and optionally an attempt function and hooks of its own (the
 * request's hooks run after the relay's). Nothing is normalised again per request or per
 * attempt; a bad per-request option (a sink that is none, `stream` not a boolean) is answered
 * to the client through the sink when it can be, and the call rejects with it, as with
 * `relay()`.
 *
 * @example
 * const chat = createRelay({
 *   pool,
 *   adapter: openaiChat,
 *   policy: { maxAttempts: 3, deadlineMs: 30_000, peek: { firstOutputTimeoutMs: 20_000 } },
 * })
 * // per request:
 * const read = await readClientRequest(request, { adapter: openaiChat })
 * if (!read.ok) return read.response
 * const { sink, response } = webSink()
 * void chat({
 *   sink,
 *   request: { url: upstreamUrl, body: read.body },
 *   attempt: fetchAttempt({ clientHeaders: request.headers }),
 *   signal: request.signal,
 * })
 * return response
 *
 * @group Relay
 */
export function createRelay(
  options: CreateRelayOptions & {
    readonly pool: KeyPool
    readonly attempt?: AttemptFunction | undefined
  },
): CompiledRelay<true>
/** With a pool and an attempt function that needs `context.request`: every request carries one. */
export function createRelay(
  options: CreateRelayOptions & {
    readonly pool: KeyPool
    readonly attempt: AttemptFunction<AttemptRequest>
  },
): CompiledRelay<true, true>
/** Without a pool: each attempt sets the caller's own credential (`key: undefined`). */
export function createRelay(
  options: CreateRelayOptions & {
    readonly pool?: undefined
    readonly attempt?: CallerCredentialsAttemptFunction | undefined
  },
): CompiledRelay<false>
/** Without a pool, and an attempt function that needs `context.request`. */
export function createRelay(
  options: CreateRelayOptions & {
    readonly pool?: undefined
    readonly attempt: CallerCredentialsAttemptFunction<AttemptRequest>
  },
): CompiledRelay<false, true>
/** Either form, when whether a `pool` is given is only known at run time. */
export function createRelay(options: CreateRelayOptions): CompiledRelay
export function createRelay(
  options: CreateRelayOptions,
): CompiledRelay | CompiledRelay<boolean, true> {
  rejectPerRequestOptions(options)
  checkSetup('createRelay', options as RelaySetup, setupKeys, true)
  const plan = compileRelay(options as RelaySetup)
  return ((call: RelayCall) => {
    try {
      checkRelayCall(plan, call)
    } catch (error) {
      return refuse(plan, call, error)
    }
    return runRelay(plan, call)
  }) as CompiledRelay
}
