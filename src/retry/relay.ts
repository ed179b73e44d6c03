/**
 * `relay()`: the call a gateway makes per request. Attempts run over a key pool inside the
 * pre-output window (on p-retry); the first attempt with output commits and is pumped to
 * its end; after that nothing is ever retried.
 *
 * @module
 */

import pRetry, { AbortError } from 'p-retry'
import type { EofClass } from '../classify/index.js'
import { type CommitGate, createCommitGate, type DownstreamSink } from '../commit/gate.js'
import { deliver, failBeforeContent, type PumpEnd, type PumpPolicy } from '../commit/pump.js'
import { isDownstreamClosedError, isStreamBoundaryError, StreamTimeoutError } from '../errors.js'
import type { KeyLease, KeyOutcome, KeyPool } from '../key-pool/types.js'
import { positiveInteger, positiveMilliseconds } from '../options.js'
import type { PeekOptions } from '../peek/index.js'
import { parseObject } from '../protocols/common.js'
import type { RenderableError, StreamAdapter, UpstreamRequest } from '../protocols/types.js'
import { type AttemptFailure, classifyAttemptFailure, type FailureVerdict } from './classify.js'
import { type ContextWindowFitOptions, fitContextWindow } from './context-window.js'
import { errorFromBody, readBounded } from './error-body.js'
import { sleep } from './sleep.js'

/** What an attempt function is given. */
export interface AttemptContext {
  /** The leased key: put `secret` in the request's credential header. */
  readonly key: {
    readonly id: string
    readonly secret: string
    readonly metadata: Readonly<Record<string, unknown>> | undefined
  }
  /** Pass to `fetch`: it aborts when the client goes away or the pre-commit deadline passes. */
  readonly signal: AbortSignal
  /** 1 for the first attempt of the request, counting across routes. */
  readonly attemptNumber: number
  /** The route's name. */
  readonly route: string
  /**
   * The request to send, when `relay` was given one: its body reflects adjustments
   * (`adjustRequest`, the context-window fit) and, for the non-streaming fallback, has
   * streaming off (`stream: false` here too). Send `JSON.stringify(request.body)`.
   */
  readonly request: (UpstreamRequest & { readonly stream: boolean }) | undefined
  /**
   * A correlation id for this attempt; send it as `x-client-request-id` so an attempt that
   * timed out can be found in upstream logs. `undefined` when `correlationIds` is off.
   */
  readonly requestId: string | undefined
}

/** Makes one upstream request and returns its `Response` (usually a `fetch`). */
export type AttemptFunction = (context: AttemptContext) => Promise<Response>

/** One way to serve the request: a protocol, a key pool and an attempt function. */
export interface Route {
  /** A name for outcomes and hooks. */
  readonly name?: string
  readonly adapter: StreamAdapter
  readonly pool: KeyPool
  readonly attempt: AttemptFunction
  /** This route's request (a fallback model's body); by default the relay's `request`. */
  readonly request?: UpstreamRequest
}

/** What `adjustRequest` is told about a refused attempt. */
export interface AdjustRequestContext {
  readonly attemptNumber: number
  readonly route: string
  /** The refused attempt's HTTP status (`null` for an error frame in a stream). */
  readonly status: number | null
  /** The upstream's error, sanitised. */
  readonly error: RenderableError
  /** The request as it was sent. */
  readonly request: UpstreamRequest
}

/** Exponential backoff with jitter, for retrying the same key. */
export interface BackoffOptions {
  /** @default 500 */
  readonly baseMs?: number
  /** @default 2 */
  readonly factor?: number
  /** @default 8_000 */
  readonly maxMs?: number
  /** Fraction of the delay added or removed at random. @default 0.25 */
  readonly jitter?: number
}

/** How {@link relay} retries and ends. */
export interface RelayPolicy extends PumpPolicy {
  /**
   * Attempts per route; `1` disables retrying.
   * @default 3
   */
  maxAttempts?: number
  /**
   * A total budget before commit, in milliseconds: no attempt starts, and no wait runs, past it,
   * so a client's own timeout is not outlived by silent retries.
   * @default undefined (no budget)
   */
  deadlineMs?: number | undefined
  /** Backoff for retrying the same key. */
  backoff?: BackoffOptions
  /**
   * Peek options per attempt.
   * @default { firstByteTimeoutMs: 120_000 } (an open body that sends nothing for 2 minutes is dead)
   */
  peek?: Omit<PeekOptions, 'signal' | 'tracker'>
  /** Routes tried in order after this request's own route is exhausted (model fallback). */
  routes?: readonly Route[]
  /**
   * Consecutive overload failures (429, 529, `overloaded_error`) after which the next route
   * is tried.
   * @default 3
   */
  overloadFallbackAfter?: number
  /**
   * `background` makes overload fail at once, without retries, so background traffic does not
   * amplify a capacity incident.
   * @default 'interactive'
   */
  priority?: 'interactive' | 'background'
  /**
   * Send headers as soon as an upstream stream is validated; failures before content are then
   * written in-band.
   * @default false
   */
  earlyHeaders?: boolean
  /** Keep-alive comment interval after headers. @default 15_000 */
  keepAliveIntervalMs?: number
  /** Headers added to the downstream response. */
  headers?: HeadersInit
  /** The reader's frame bound. @default 1_048_576 */
  maxFrameBytes?: number
  /** How much of an upstream error body is read for its message. @default 65_536 */
  maxErrorBodyBytes?: number
  /**
   * Send a correlation id per attempt (`AttemptContext.requestId`, reported in outcomes and
   * hooks).
   * @default true
   */
  correlationIds?: boolean
  /**
   * Called when an attempt is refused for its request (a 4xx, a non-retryable error frame):
   * return a changed body to try again with it, or `undefined` to give up as usual. Needs
   * `request`.
   */
  adjustRequest?:
    | ((context: AdjustRequestContext) => Record<string, unknown> | undefined)
    | undefined
  /**
   * When input plus the output budget overflows the context window and the error says the
   * numbers, lower the budget to fit and retry once (`true`, or margin and floor). Needs
   * `request`.
   * @default false
   */
  fitContextWindow?: boolean | ContextWindowFitOptions
  /**
   * After a route's streaming attempts all failed before output (or at once on a 404/405 to the
   * streaming request), send one non-streaming request and turn its answer into the
   * protocol's stream. Needs `request` and an adapter with `nonStreamingRequest` and
   * `renderFromMessage` (all four shipped ones).
   * @default false
   */
  nonStreamingFallback?: boolean | { readonly timeoutMs?: number }
}

/** Defaults of {@link RelayPolicy}. */
export const relayDefaults = Object.freeze({
  maxAttempts: 3,
  backoff: Object.freeze({ baseMs: 500, factor: 2, maxMs: 8_000, jitter: 0.25 }),
  peek: Object.freeze({ firstByteTimeoutMs: 120_000 }),
  overloadFallbackAfter: 3,
  priority: 'interactive' as const,
  maxErrorBodyBytes: 65_536,
  correlationIds: true,
  fitContextWindow: false,
  nonStreamingFallback: false,
  /** The non-streaming fallback's own timeout (shorter when the deadline leaves less). */
  fallbackTimeoutMs: 300_000,
})

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
      readonly keyId: string
      /** `non-streaming` when the answer came from the non-streaming fallback. */
      readonly mode: 'stream' | 'non-streaming'
      /** From the start of the request to the first output. */
      readonly timeToFirstOutputMs: number
      readonly end: PumpEnd
      readonly eof: EofClass | null
      readonly bytes: number
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
    readonly keyId: string
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
    readonly keyId: string
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

/** Options of {@link relay}. */
export interface RelayOptions {
  /** Where the response goes (`webSink().sink`, `nodeSink(res)`). */
  readonly sink: DownstreamSink
  readonly attempt: AttemptFunction
  readonly pool: KeyPool
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

/** Thrown inside the retry loop for a failed attempt. */
class AttemptFailedError extends Error {
  readonly verdict: FailureVerdict
  constructor(verdict: FailureVerdict) {
    super(verdict.reason)
    this.verdict = verdict
  }
}

/** What a committed attempt hands to the outcome. */
type Committed = Omit<
  Extract<RelayOutcome, { kind: 'committed' }>,
  'kind' | 'attempts' | 'durationMs'
> & {
  readonly attemptNumber: number
}

const now = (): number => performance.now()

/** The most of a non-streaming answer the fallback reads. */
const maxMessageBytes = 32 * 1024 * 1024

function callHook<T>(hook: ((context: T) => void) | undefined, context: T): void {
  if (hook === undefined) return
  try {
    hook(Object.freeze(context))
  } catch {
    // A hook must never break the request it observes.
  }
}

function backoffDelay(options: Required<BackoffOptions>, retry: number): number {
  const raw = Math.min(options.maxMs, options.baseMs * options.factor ** Math.max(0, retry))
  const spread = raw * options.jitter
  return Math.max(0, Math.round(raw - spread + Math.random() * 2 * spread))
}

function isEventStream(headers: Headers): boolean {
  const type = headers.get('content-type')
  // A missing content type is read as SSE: the peek then tells malformed bodies apart.
  return type === null || /^text\/event-stream\b/i.test(type.trim())
}

function normalize(policy: RelayPolicy) {
  const maxAttempts = positiveInteger(
    'maxAttempts',
    policy.maxAttempts ?? relayDefaults.maxAttempts,
  )
  const deadlineMs = policy.deadlineMs
  if (deadlineMs !== undefined) positiveMilliseconds('deadlineMs', deadlineMs)
  const overloadFallbackAfter = positiveInteger(
    'overloadFallbackAfter',
    policy.overloadFallbackAfter ?? relayDefaults.overloadFallbackAfter,
  )
  return {
    maxAttempts,
    deadlineMs,
    overloadFallbackAfter,
    backoff: { ...relayDefaults.backoff, ...policy.backoff },
    peek: policy.peek ?? relayDefaults.peek,
    priority: policy.priority ?? relayDefaults.priority,
    maxErrorBodyBytes: policy.maxErrorBodyBytes ?? relayDefaults.maxErrorBodyBytes,
    correlationIds: policy.correlationIds ?? relayDefaults.correlationIds,
    fit:
      policy.fitContextWindow === true
        ? {}
        : policy.fitContextWindow === false || policy.fitContextWindow === undefined
          ? undefined
          : policy.fitContextWindow,
    fallback: policy.nonStreamingFallback !== undefined && policy.nonStreamingFallback !== false,
    fallbackTimeoutMs:
      typeof policy.nonStreamingFallback === 'object'
        ? (policy.nonStreamingFallback.timeoutMs ?? relayDefaults.fallbackTimeoutMs)
        : relayDefaults.fallbackTimeoutMs,
  }
}

/**
 * Relays one streaming request: attempts over the key pool (and the fallback routes) while
 * nothing has reached the client, commits the first attempt with output, and pumps it to an
 * honest end. When every attempt fails before commit, the client gets a real status (502 for
 * upstream failures, 504 for timeouts, 429 or 529 passing on rate limits and overload, the
 * upstream's own 4xx for a rejected request) with a JSON body in the protocol's shape, or,
 * with early headers, the protocol's in-band error frame.
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
export async function relay(options: RelayOptions): Promise<RelayOutcome> {
  const policy = options.policy ?? {}
  const config = normalize(policy)
  const hooks = options.hooks ?? {}
  const started = now()
  const gate: CommitGate = createCommitGate(options.sink, {
    earlyHeaders: policy.earlyHeaders ?? false,
    ...(policy.keepAliveIntervalMs === undefined
      ? {}
      : { keepAliveIntervalMs: policy.keepAliveIntervalMs }),
    ...(policy.headers === undefined ? {} : { headers: policy.headers }),
  })
  const routes: Route[] = [
    {
      name: options.name ?? 'primary',
      adapter: options.adapter,
      pool: options.pool,
      attempt: options.attempt,
    },
    ...(policy.routes ?? []),
  ]
  const attempts: AttemptRecord[] = []
  const stopSignals = [gate.signal, options.signal].filter((s): s is AbortSignal => s !== undefined)
  const stop =
    stopSignals.length === 1 ? (stopSignals[0] as AbortSignal) : AbortSignal.any(stopSignals)

  // The pre-commit budget: aborts waits and attempts that have not committed.
  const deadline = new AbortController()
  const deadlineAt =
    config.deadlineMs === undefined ? Number.POSITIVE_INFINITY : started + config.deadlineMs
  const deadlineTimer =
    config.deadlineMs === undefined
      ? undefined
      : setTimeout(
          () => deadline.abort(new StreamTimeoutError('deadline', config.deadlineMs as number)),
          config.deadlineMs,
        )
  ;(deadlineTimer as { unref?: () => void } | undefined)?.unref?.()
  const waitSignal = AbortSignal.any([stop, deadline.signal])

  let attemptNumber = 0
  let last: { verdict: FailureVerdict; adapter: StreamAdapter } | undefined

  const finish = (outcome: RelayOutcome): RelayOutcome => {
    callHook(hooks.onOutcome, outcome)
    return outcome
  }

  async function runRoute(route: Route, routeName: string): Promise<Committed | undefined> {
    const tried = new Set<string>()
    let sameKeyRetries = 0
    let overloads = 0
    /** Why the previous attempt of this route failed, told to `onRetry` once the next key is known. */
    let retryReason: string | undefined
    const hasNextRoute = routes.indexOf(route) < routes.length - 1
    /** The request as it will be sent next (adjustments replace it). */
    let currentRequest: UpstreamRequest | undefined = route.request ?? options.request
    let fitted = false

    /** A changed request for an attempt refused for its request, or `undefined`. */
    const adjust = (
      verdict: FailureVerdict,
      status: number | null,
      number: number,
    ): UpstreamRequest | undefined => {
      const request = currentRequest
      if (request === undefined) return undefined
      const body = policy.adjustRequest?.({
        attemptNumber: number,
        route: routeName,
        status,
        error: verdict.error,
        request,
      })
      if (body !== undefined) return { url: request.url, body }
      if (config.fit !== undefined && !fitted) {
        fitted = true
        return fitContextWindow(route.adapter.name, request, verdict.error.message, config.fit)
      }
      return undefined
    }

    /** Leases a key, preferring untried ones; waits only when the budget allows. */
    const leaseKey = async (): Promise<KeyLease> => {
      const waitStarted = now()
      const leased = (lease: KeyLease): KeyLease => {
        if (retryReason !== undefined) {
          callHook(hooks.onRetry, {
            attemptNumber: attemptNumber + 1,
            reason: retryReason,
            delayMs: Math.round(now() - waitStarted),
            nextKeyId: lease.keyId,
            route: routeName,
          })
        }
        return lease
      }
      let waited = false
      for (;;) {
        let result = await route.pool.acquire({ exclude: tried })
        let reused = false
        if (result.kind === 'unavailable' && result.reason === 'all-excluded') {
          result = await route.pool.acquire()
          reused = true
        }
        if (result.kind === 'leased') {
          // Reusing a key already tried backs off first, unless we just waited out a cooldown.
          if (reused && !waited) {
            const delay = backoffDelay(config.backoff, sameKeyRetries++)
            try {
              if (now() + delay > deadlineAt)
                throw new AttemptFailedError(budgetVerdict(last?.verdict))
              await sleep(delay, waitSignal)
            } catch (error) {
              // The lease ends unused: the request is over, which is not the key's doing.
              await result.lease.report({ kind: 'client-gone' })
              throw error
            }
          }
          return leased(result.lease)
        }
        if (result.kind === 'unavailable') {
          throw new AttemptFailedError({
            retry: false,
            key: { kind: 'protocol-fault' },
            reason: `no-key:${result.reason}`,
            overload: false,
            status: 503,
            error: {
              type: 'upstream_error',
              message: 'no usable upstream key is configured',
              status: 503,
            },
          })
        }
        // Every key is cooling down: wait for the earliest, if the budget allows.
        if (result.kind === 'busy') throw new Error('TODO: busy (relay rebuild)')
        if (now() + result.retryInMs > deadlineAt || config.priority === 'background') {
          throw new AttemptFailedError(coolingVerdict(result.retryInMs))
        }
        await sleep(result.retryInMs, waitSignal)
        waited = true
      }
    }

    const runAttempt = async (mode: 'stream' | 'non-streaming'): Promise<Committed> => {
      gate.assertCanRetry()
      const lease = await leaseKey()
      attemptNumber++
      const number = attemptNumber
      tried.add(lease.keyId)
      const attemptStarted = now()
      const requestId = config.correlationIds ? globalThis.crypto.randomUUID() : undefined
      const sent = currentRequest
      const request =
        sent === undefined
          ? undefined
          : mode === 'stream'
            ? { ...sent, stream: true }
            : { ...(route.adapter.nonStreamingRequest?.(sent) ?? sent), stream: false }
      callHook(hooks.onAttempt, {
        attemptNumber: number,
        route: routeName,
        keyId: lease.keyId,
        mode,
        requestId,
      })
      const record = (status: number | null, result: string, retry: boolean) =>
        attempts.push({
          attemptNumber: number,
          route: routeName,
          keyId: lease.keyId,
          mode,
          requestId,
          status,
          result,
          retry,
          durationMs: now() - attemptStarted,
        })
      const fail = async (failed: FailureVerdict, status: number | null): Promise<never> => {
        let verdict = failed
        // Refused for its request: a changed request may succeed (the key did nothing wrong).
        if (!verdict.retry && verdict.key.kind === 'rejected' && mode === 'stream') {
          const adjusted = adjust(verdict, status, number)
          if (adjusted !== undefined) {
            currentRequest = adjusted
            verdict = { ...verdict, retry: true, reason: `${verdict.reason}:request-adjusted` }
          }
        }
        await lease.report(verdict.key)
        last = { verdict, adapter: route.adapter }
        record(status, verdict.reason, verdict.retry)
        throw new AttemptFailedError(verdict)
      }

      // The attempt's own signal follows the deadline only until commit.
      const controller = new AbortController()
      const onStop = () => controller.abort(stop.reason)
      const onDeadline = () => controller.abort(deadline.signal.reason)
      const detachDeadline = () => deadline.signal.removeEventListener('abort', onDeadline)
      if (stop.aborted) onStop()
      else stop.addEventListener('abort', onStop, { once: true })
      if (deadline.signal.aborted) onDeadline()
      else deadline.signal.addEventListener('abort', onDeadline, { once: true })
      // The non-streaming fallback has its own bound: a whole answer can take long to come.
      const fallbackMs = Math.min(config.fallbackTimeoutMs, Math.max(1, deadlineAt - now()))
      const fallbackTimer =
        mode === 'non-streaming'
          ? setTimeout(
              () => controller.abort(new StreamTimeoutError('first-output', fallbackMs)),
              fallbackMs,
            )
          : undefined
      ;(fallbackTimer as { unref?: () => void } | undefined)?.unref?.()
      try {
        let response: Response
        try {
          response = await route.attempt({
            key: { id: lease.keyId, secret: lease.secret, metadata: lease.metadata },
            signal: controller.signal,
            attemptNumber: number,
            route: routeName,
            request,
            requestId,
          })
        } catch (error) {
          if (stop.aborted) return await fail(clientGoneVerdict(), null)
          if (deadline.signal.aborted) return await fail(budgetVerdict(last?.verdict), null)
          if (controller.signal.aborted) return await fail(fallbackTimeoutVerdict(fallbackMs), null)
          return await fail(classifyAttemptFailure({ kind: 'connection', error }), null)
        }
        const status = response.status
        if (
          (status === 404 || status === 405) &&
          mode === 'stream' &&
          config.fallback &&
          request !== undefined
        ) {
          await readBounded(response.body, 0)
          return await fail(streamingUnsupportedVerdict(status), status)
        }
        if (status < 200 || status > 299) {
          const text = await readBounded(response.body, config.maxErrorBodyBytes)
          const failure: AttemptFailure = {
            kind: 'status',
            status,
            headers: response.headers,
            error: errorFromBody(text, status),
          }
          return await fail(classifyAttemptFailure(failure), status)
        }
        let body: ReadableStream<Uint8Array> | null = response.body
        if (mode === 'non-streaming') {
          const text = await readBounded(response.body, maxMessageBytes)
          const message = parseObject(text)
          const rendered =
            message === undefined ? undefined : route.adapter.renderFromMessage?.(message)
          if (rendered === undefined) {
            return await fail(
              classifyAttemptFailure({
                kind: 'not-sse',
                status,
                contentType: response.headers.get('content-type'),
                error: errorFromBody(text, status),
              }),
              status,
            )
          }
          body = new ReadableStream<Uint8Array>({
            start(controller) {
              controller.enqueue(rendered)
              controller.close()
            },
          })
        } else if (response.body === null || !isEventStream(response.headers)) {
          const text = await readBounded(response.body, config.maxErrorBodyBytes)
          const error = errorFromBody(text, status)
          return await fail(
            classifyAttemptFailure({
              kind: 'not-sse',
              status,
              contentType: response.headers.get('content-type'),
              error,
            }),
            status,
          )
        }
        gate.setUpstreamHeaders(response.headers)
        let timeToFirstOutputMs = 0
        const delivered = await deliver({
          gate,
          body: body as ReadableStream<Uint8Array>,
          adapter: route.adapter,
          peek: config.peek,
          ...(policy.maxFrameBytes === undefined ? {} : { maxFrameBytes: policy.maxFrameBytes }),
          signal: options.signal,
          peekSignal: deadline.signal,
          onPartialEof: policy.onPartialEof,
          onThinkingOnly: policy.onThinkingOnly,
          idleTimeoutMs: policy.idleTimeoutMs,
          ...(policy.stallThresholdMs === undefined
            ? {}
            : { stallThresholdMs: policy.stallThresholdMs }),
          onCommit: () => {
            detachDeadline()
            timeToFirstOutputMs = now() - started
            callHook(hooks.onCommit, {
              attemptNumber: number,
              route: routeName,
              keyId: lease.keyId,
              timeToFirstOutputMs,
            })
          },
        })
        if (delivered.kind === 'not-committed') {
          const peek = delivered.peek
          if (peek.kind === 'aborted' && !stop.aborted && deadline.signal.aborted) {
            return await fail(budgetVerdict(last?.verdict), status)
          }
          return await fail(classifyAttemptFailure({ kind: 'peek', outcome: peek }), status)
        }
        const end = delivered.pump.end
        const keyOutcome: KeyOutcome =
          end.kind === 'downstream-closed' || end.kind === 'aborted'
            ? { kind: 'client-gone' }
            : { kind: 'success' }
        await lease.report(keyOutcome)
        record(status, 'committed', false)
        return {
          attemptNumber: number,
          route: routeName,
          keyId: lease.keyId,
          mode,
          timeToFirstOutputMs,
          end,
          eof: delivered.pump.eof,
          bytes: delivered.pump.bytes,
        }
      } finally {
        if (fallbackTimer !== undefined) clearTimeout(fallbackTimer)
        stop.removeEventListener('abort', onStop)
        detachDeadline()
      }
    }

    /** One non-streaming attempt, after the streaming ones failed before output. */
    const runFallback = async (): Promise<Committed | undefined> => {
      const verdict = last?.verdict
      const wanted =
        config.fallback &&
        currentRequest !== undefined &&
        route.adapter.nonStreamingRequest !== undefined &&
        route.adapter.renderFromMessage !== undefined &&
        verdict !== undefined &&
        (verdict.retry || verdict.reason === 'streaming-unsupported')
      // Overload already spent this route's budget: the fallback would only add load.
      const overloaded = overloads >= config.overloadFallbackAfter && hasNextRoute
      if (!wanted || overloaded || !gate.canRetry || stop.aborted || deadline.signal.aborted)
        return undefined
      retryReason = verdict.reason
      try {
        return await runAttempt('non-streaming')
      } catch (error) {
        if (error instanceof AttemptFailedError) {
          if (error.verdict.overload) overloads++
          return undefined
        }
        if (stop.aborted || deadline.signal.aborted) return undefined
        throw error
      }
    }

    // p-retry checks its signal even after a success: keep a committed result it would discard.
    let committed: Committed | undefined
    try {
      return await pRetry(
        async () => {
          committed = await runAttempt('stream')
          return committed
        },
        {
          retries: config.maxAttempts - 1,
          minTimeout: 0,
          factor: 1,
          signal: stop,
          shouldRetry: ({ error }) => {
            if (
              !(error instanceof AttemptFailedError) ||
              !gate.canRetry ||
              stop.aborted ||
              deadline.signal.aborted
            )
              return false
            const verdict = error.verdict
            overloads = verdict.overload ? overloads + 1 : 0
            if (verdict.overload && config.priority === 'background') return false
            if (verdict.overload && overloads >= config.overloadFallbackAfter && hasNextRoute)
              return false
            return verdict.retry
          },
          onFailedAttempt: ({ error }) => {
            retryReason = error instanceof AttemptFailedError ? error.verdict.reason : undefined
          },
        },
      )
    } catch (error) {
      if (committed !== undefined) return committed
      if (error instanceof AttemptFailedError) {
        last = { verdict: error.verdict, adapter: route.adapter }
        return runFallback()
      }
      if (stop.aborted || deadline.signal.aborted || error instanceof AbortError) return undefined
      throw error
    }
  }

  try {
    for (const route of routes) {
      const name = route.name ?? `route-${routes.indexOf(route) + 1}`
      const committed = await runRoute(route, name)
      if (committed !== undefined) {
        return finish({
          kind: 'committed',
          attempts,
          route: committed.route,
          keyId: committed.keyId,
          mode: committed.mode,
          timeToFirstOutputMs: committed.timeToFirstOutputMs,
          end: committed.end,
          eof: committed.eof,
          bytes: committed.bytes,
          durationMs: now() - started,
        })
      }
      if (stop.aborted || deadline.signal.aborted || !gate.canRetry) break
      const verdict = last?.verdict
      // Fall back to the next route only for failures another model might not have.
      if (verdict !== undefined && !verdict.retry && !verdict.overload) break
      if (verdict?.overload && config.priority === 'background') break
    }
    if (stop.aborted || isDownstreamClosedError(gate.failure)) {
      return finish({ kind: 'client-gone', attempts, durationMs: now() - started })
    }
    const verdict = deadline.signal.aborted
      ? budgetVerdict(last?.verdict)
      : (last?.verdict ?? budgetVerdict(undefined))
    const adapter = last?.adapter ?? options.adapter
    const retryAfterMs = verdict.retryAfterMs
    const headers =
      retryAfterMs === undefined ||
      (verdict.status !== 429 && verdict.status !== 503 && verdict.status !== 529)
        ? undefined
        : { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) }
    callHook(hooks.onGiveUp, { status: verdict.status, reason: verdict.reason, attempts })
    try {
      await failBeforeContent(
        gate,
        adapter,
        verdict.status,
        { ...verdict.error, status: verdict.status },
        headers,
      )
    } catch (error) {
      if (!isStreamBoundaryError(error)) throw error
      return finish({ kind: 'client-gone', attempts, durationMs: now() - started })
    }
    return finish({
      kind: 'failed',
      attempts,
      status: verdict.status,
      error: verdict.error,
      reason: verdict.reason,
      retryAfterMs,
      durationMs: now() - started,
    })
  } finally {
    if (deadlineTimer !== undefined) clearTimeout(deadlineTimer)
  }
}

function clientGoneVerdict(): FailureVerdict {
  return {
    retry: false,
    key: { kind: 'client-gone' },
    reason: 'client-gone',
    overload: false,
    status: 499,
    error: { type: 'client_closed', message: 'the client went away' },
  }
}

function streamingUnsupportedVerdict(status: number): FailureVerdict {
  return {
    retry: false,
    key: { kind: 'rejected' },
    reason: 'streaming-unsupported',
    overload: false,
    status: 502,
    error: {
      type: 'upstream_error',
      message: `the upstream refused the streaming request (${status})`,
    },
  }
}

function fallbackTimeoutVerdict(ms: number): FailureVerdict {
  return {
    retry: false,
    key: { kind: 'protocol-fault' },
    reason: 'fallback-timeout',
    overload: false,
    status: 504,
    error: { type: 'timeout', message: `the non-streaming fallback got no answer within ${ms} ms` },
  }
}

function coolingVerdict(retryInMs: number): FailureVerdict {
  return {
    retry: false,
    key: { kind: 'protocol-fault' },
    reason: 'all-keys-cooling',
    overload: true,
    status: 429,
    error: {
      type: 'rate_limit_error',
      message: `every upstream key is rate limited; retry in ${Math.max(1, Math.ceil(retryInMs / 1000))} s`,
    },
    retryAfterMs: retryInMs,
  }
}

/** The pre-commit budget ran out: a timeout, unless the last failure says something better. */
function budgetVerdict(previous: FailureVerdict | undefined): FailureVerdict {
  if (previous !== undefined && previous.status !== 502) return { ...previous, retry: false }
  return {
    retry: false,
    key: { kind: 'protocol-fault' },
    reason: 'deadline',
    overload: false,
    status: 504,
    error: { type: 'timeout', message: 'no upstream attempt produced output within the deadline' },
  }
}
