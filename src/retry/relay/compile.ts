/**
 * Building a relay once: every option that does not change per request (the pool, the
 * adapter, the attempt function, the policy and its routes, the hooks, the name) is checked,
 * defaulted, guarded and frozen into a {@link RelayPlan}; what each request brings (its sink,
 * request, signal, secrets, `stream`, and an attempt function or hooks of its own) is checked
 * with `typeof` alone. `relay()` builds a plan per call; `createRelay()` and
 * `createResilientFetch()` once (guarantee 30).
 *
 * @module
 */

import { callSafely } from '../../call-safely.js'
import { checkTrackerOptions } from '../../classify/index.js'
import { wholeStreamTranslator } from '../../commit/encoder.js'
import type { DownstreamSink } from '../../commit/gate-options.js'
import type { KeyPool } from '../../key-pool/types.js'
import { rejectUnknownKeys } from '../../options.js'
import type { StreamAdapter, UpstreamRequest } from '../../protocols/types.js'
import type {
  AttemptFunction,
  CallerCredentialsAttemptFunction,
  Route,
} from '../shared/attempt-types.js'
import type { RelayHooks, RelayOptions } from '../shared/outcome.js'
import type { NormalizedRelayPolicy, RelayPolicy } from '../shared/policy-types.js'
import { guardAdapter, guardFunction } from '../shared/user-code.js'
import { checkTranslation } from './downstream-policy.js'
import { normalizeRelayPolicy } from './policy.js'

/** An attempt function, with a pool's key or the caller's own credentials. */
export type AnyAttemptFunction = AttemptFunction | CallerCredentialsAttemptFunction

/** What a relay is built from: everything but what each request brings. */
export interface RelaySetup {
  readonly pool?: KeyPool | undefined
  readonly adapter: StreamAdapter
  /** The primary route's attempt function; a request may bring its own. */
  readonly attempt?: AnyAttemptFunction | undefined
  readonly policy?: RelayPolicy | undefined
  readonly hooks?: RelayHooks | undefined
  readonly name?: string | undefined
}

/** What one request brings to a built relay (`relay()`'s per-request options). */
export interface RelayCall {
  readonly sink: DownstreamSink
  readonly request?: UpstreamRequest | undefined
  readonly signal?: AbortSignal | undefined
  readonly secrets?: readonly string[] | undefined
  readonly stream?: boolean | undefined
  readonly attempt?: AnyAttemptFunction | undefined
  readonly hooks?: RelayHooks | undefined
}

/** A relay built once: what every request reads, checked, guarded and frozen. */
export interface RelayPlan {
  /** The policy, normalised, with the host's client adapter and translator guarded. */
  readonly config: NormalizedRelayPolicy
  /** The primary route's adapter, guarded (a shipped adapter as it is). */
  readonly adapter: StreamAdapter
  /** The host's own adapters, to answer a refused request with. */
  readonly given: { readonly adapter: StreamAdapter; readonly client: StreamAdapter | undefined }
  readonly name: string
  readonly pool: KeyPool | undefined
  readonly attempt: AnyAttemptFunction | undefined
  /** The policy's routes, their adapters guarded. */
  readonly fallbacks: readonly Route[]
  /** Every route, when the relay was given its attempt function (else made per request). */
  readonly routes: readonly Route[] | undefined
  readonly hooks: RelayHooks
  /**
   * Why a non-streaming request cannot go through this relay's client translation (a stream
   * translator, or `downstream.adapter` without one), or `undefined` when it can.
   */
  readonly wholeRefusal: string | undefined
}

/** What a non-streaming request refuses (see {@link RelayPlan.wholeRefusal}). */
function wholeRefusalOf(
  downstream: NormalizedRelayPolicy['downstream'],
  adapter: StreamAdapter,
): string | undefined {
  // Of the translators, only `Response → Response` is given whole answers too.
  const translator = wholeStreamTranslator(downstream)?.kind
  if (translator !== undefined && translator !== 'response') {
    return `a non-streaming request cannot go through a stream translator (downstream.${translator === 'frames' ? 'translateFrames' : 'translateStream'}): use downstream.translateResponse, which is given whole answers too, or pass stream: true when the client asked for a stream`
  }
  const client = downstream.adapter
  if (client !== undefined && client !== adapter && translator === undefined) {
    return 'a non-streaming request cannot be translated by downstream.adapter: use downstream.translateResponse, which is given whole answers too, send the upstream a streaming request, or translate the whole answer in the host'
  }
  return undefined
}

/** Every option of `relay()`: a table the compiler keeps complete. */
export const relayKeys: readonly string[] = Object.keys({
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
} satisfies Record<keyof RelayOptions, true>)

/** Every option a built relay's request takes. */
const callKeys = Object.keys({
  sink: true,
  request: true,
  signal: true,
  secrets: true,
  stream: true,
  attempt: true,
  hooks: true,
} satisfies Record<keyof RelayCall, true>)

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

/**
 * The checks of what a relay is built from (`relay()`'s first ones, in their order): unknown
 * options, the hooks' names, the attempt function (unless `attemptOptional`), the pool, the
 * adapter.
 */
export function checkSetup(
  where: string,
  options: RelaySetup,
  known: readonly string[],
  attemptOptional = false,
): void {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`${where}() needs an options object`)
  }
  rejectUnknownKeys(where, options, known)
  rejectUnknownKeys(`${where}: hooks`, options.hooks, hookKeys)
  if (!(attemptOptional && options.attempt === undefined) && typeof options.attempt !== 'function')
    throw new TypeError('attempt must be a function')
  if (options.pool !== undefined && typeof options.pool.acquire !== 'function') {
    throw new TypeError('pool must be a KeyPool (or left out when the caller owns the credentials)')
  }
  if (typeof options.adapter?.inspect !== 'function') {
    throw new TypeError('adapter must be a StreamAdapter')
  }
}

/** The checks of what a request brings: its sink, `stream` and `secrets` (`typeof` only). */
export function checkCall(call: RelayCall): void {
  if (typeof call.sink?.sendHead !== 'function')
    throw new TypeError('sink must be a DownstreamSink')
  if (call.stream !== undefined && typeof call.stream !== 'boolean') {
    throw new TypeError(`stream must be a boolean, got ${typeof call.stream}`)
  }
  if (
    call.secrets !== undefined &&
    (!Array.isArray(call.secrets) || call.secrets.some((s) => typeof s !== 'string'))
  ) {
    throw new TypeError('secrets must be a list of strings')
  }
}

/**
 * A built relay's request, checked: its options (unknown ones named), and its own attempt
 * function and hooks when it brings them.
 */
export function checkRelayCall(plan: RelayPlan, call: RelayCall): void {
  if (typeof call !== 'object' || call === null) {
    throw new TypeError('a relay built by createRelay() needs an options object per request')
  }
  rejectUnknownKeys('relay', call, callKeys)
  checkCall(call)
  if (call.attempt !== undefined ? typeof call.attempt !== 'function' : plan.attempt === undefined)
    throw new TypeError('attempt must be a function')
  if (call.hooks !== undefined) rejectUnknownKeys('relay: hooks', call.hooks, hookKeys)
}

/** The policy with the host's client-side adapter and translator guarded. */
function guarded(config: NormalizedRelayPolicy): NormalizedRelayPolicy {
  const { adapter, transform } = config.downstream
  if (adapter === undefined && transform === undefined) return config
  return Object.freeze({
    ...config,
    downstream: Object.freeze({
      ...config.downstream,
      adapter: guardAdapter(adapter),
      transform: guardFunction('downstream.transform', transform),
    }),
  })
}

/** The primary route, with an attempt function. */
export function primaryRoute(plan: RelayPlan, attempt: AnyAttemptFunction): Route {
  return Object.freeze(
    plan.pool === undefined
      ? { name: plan.name, adapter: plan.adapter, attempt }
      : { name: plan.name, adapter: plan.adapter, pool: plan.pool, attempt },
  ) as Route
}

/**
 * Checks, defaults, guards and freezes what a relay is built from; throws a `TypeError` or
 * `RangeError` naming a bad option, with `relay()`'s messages. `setup` was checked by
 * {@link checkSetup}; `normalized` is its policy when it was normalised already (one
 * `createResilientFetch` builds a plan per protocol over one policy).
 */
export function compileRelay(
  setup: RelaySetup,
  normalized: NormalizedRelayPolicy = normalizeRelayPolicy(setup.policy),
): RelayPlan {
  const routes = setup.policy?.routes ?? []
  for (const route of routes) checkSetup('relay', { ...setup, ...route }, relayKeys)
  if (setup.pool === undefined && normalized.hedge?.options.sameKey === false) {
    throw new TypeError(
      'policy.hedge cannot hedge a relay without a pool: a hedge needs another key, or the same credential again with createHedging({ sameKey: true })',
    )
  }
  checkTranslation(normalized.downstream, [setup.adapter, ...routes.map((each) => each.adapter)])
  const config = guarded(normalized)
  // The host's adapters and translator are guarded once: a throw names its component.
  const adapter = guardAdapter(setup.adapter)
  const fallbacks = routes.map((route) =>
    Object.freeze({ ...route, adapter: guardAdapter(route.adapter) }),
  )
  for (const each of [adapter, config.downstream.adapter, ...fallbacks.map((r) => r.adapter)]) {
    // A bad limit of an adapter's own is its attempts' failure, as before: not the relay's.
    if (each !== undefined) callSafely(checkTrackerOptions, each, config.peek.trackerOptions)
  }
  const plan: RelayPlan = {
    config,
    adapter,
    given: { adapter: setup.adapter, client: normalized.downstream.adapter },
    name: setup.name ?? 'primary',
    pool: setup.pool,
    attempt: setup.attempt,
    fallbacks: Object.freeze(fallbacks),
    routes: undefined,
    hooks: Object.freeze({ ...setup.hooks }),
    wholeRefusal: wholeRefusalOf(normalized.downstream, setup.adapter),
  }
  const attempt = setup.attempt
  return Object.freeze(
    attempt === undefined
      ? plan
      : { ...plan, routes: Object.freeze([primaryRoute(plan, attempt), ...plan.fallbacks]) },
  )
}

const hookNames = hookKeys as readonly (keyof RelayHooks)[]

/**
 * The relay's hooks, then the request's own: each request hook runs after the relay's, and a
 * throw from one does not keep the other from running.
 */
export function mergeHooks(built: RelayHooks, own: RelayHooks | undefined): RelayHooks {
  if (own === undefined) return built
  const merged: Record<string, (context: never) => void> = {}
  for (const name of hookNames) {
    const first = built[name] as ((context: never) => void) | undefined
    const second = own[name] as ((context: never) => void) | undefined
    const hook =
      first === undefined || second === undefined
        ? (first ?? second)
        : (context: never) => {
            callSafely(first, context)
            second(context)
          }
    if (hook !== undefined) merged[name] = hook
  }
  return merged as RelayHooks
}
