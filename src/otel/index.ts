/**
 * `stream-boundary/otel`: OpenTelemetry traces and metrics for relayed requests, named and
 * attributed by the OpenTelemetry GenAI semantic conventions (v1.41.0, status Development),
 * plus this library's own attributes under `stream_boundary.*`. `@opentelemetry/api` is an
 * optional peer dependency: nothing of OpenTelemetry is in the root entry.
 *
 * Everything is recorded once, when the request ends (`onOutcome`), from its outcome: a span
 * per request, a child span per attempt with its real start and duration, and the metrics.
 * Nothing runs per frame.
 *
 * @module stream-boundary/otel
 */

import {
  type Attributes,
  context as contextApi,
  type Meter,
  type MeterProvider,
  metrics,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  type TracerProvider,
  trace,
} from '@opentelemetry/api'
import type {
  AttemptRecord,
  KeyStateEvent,
  RelayHooks,
  RelayOutcome,
  TokenUsage,
} from '../index.js'
import { rejectUnknownKeys } from '../options.js'

/** The instrumentation scope's name. */
const scope = 'stream-boundary'

// Written in by the build (tsup.config.ts `define`, and vitest.config.ts for the tests): the
// package's version, without reading package.json at run time. Undefined when the source runs
// unbuilt some other way; the scope then has no version.
declare const __STREAM_BOUNDARY_VERSION__: string | undefined
/** The instrumentation scope's version: the package's. */
const scopeVersion =
  typeof __STREAM_BOUNDARY_VERSION__ === 'string' ? __STREAM_BOUNDARY_VERSION__ : undefined

/**
 * Options of {@link createRelayTelemetry}.
 *
 * @group OpenTelemetry
 */
export interface RelayTelemetryOptions {
  /** Where spans go. @default the global tracer provider (`trace.getTracerProvider()`) */
  readonly tracerProvider?: TracerProvider | undefined
  /** Where metrics go. @default the global meter provider (`metrics.getMeterProvider()`) */
  readonly meterProvider?: MeterProvider | undefined
  /**
   * Opt-in content capture: prompt and completion contents are never recorded unless this
   * returns them for a request (the library itself keeps no content). What it returns is
   * recorded as `gen_ai.input.messages` and `gen_ai.output.messages` on the request's span.
   * @default undefined (no content recorded)
   */
  readonly content?:
    | ((outcome: RelayOutcome) => { readonly input?: string; readonly output?: string } | undefined)
    | undefined
}

/**
 * What {@link createRelayTelemetry} returns: hooks to give `relay()` or
 * `createResilientFetch()`, and a key pool's `onKeyState`.
 *
 * @group OpenTelemetry
 */
export interface RelayTelemetry {
  /** Hooks that record the request when it ends; pass them as `hooks`. */
  readonly hooks: RelayHooks
  /** The same hooks, calling `hooks` of your own as well (theirs first). */
  withHooks(hooks?: RelayHooks): RelayHooks
  /** Counts a key's state change (`stream_boundary.key.state_changes`); pass it as a pool's `onKeyState`. */
  onKeyState(event: KeyStateEvent): void
}

/** The GenAI provider name of each shipped protocol. */
const providers: Readonly<Record<string, string>> = {
  'openai-chat': 'openai',
  'openai-responses': 'openai',
  'anthropic-messages': 'anthropic',
  gemini: 'gcp.gemini',
}

/** Token counts land in these buckets (the GenAI conventions' advice). */
const tokenBuckets = [
  1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
]
/** Durations, in seconds (the GenAI conventions' advice). */
const secondsBuckets = [
  0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
]

/** The instruments, made once per telemetry. */
function instruments(meter: Meter) {
  return {
    duration: meter.createHistogram('gen_ai.client.operation.duration', {
      unit: 's',
      description: 'GenAI operation duration',
      advice: { explicitBucketBoundaries: secondsBuckets },
    }),
    tokens: meter.createHistogram('gen_ai.client.token.usage', {
      unit: '{token}',
      description: 'Number of input and output tokens used',
      advice: { explicitBucketBoundaries: tokenBuckets },
    }),
    firstChunk: meter.createHistogram('gen_ai.client.operation.time_to_first_chunk', {
      unit: 's',
      description: 'Time to the first output the client was sent',
      advice: { explicitBucketBoundaries: secondsBuckets },
    }),
    attempts: meter.createHistogram('stream_boundary.attempts', {
      unit: '{attempt}',
      description: 'Upstream attempts per request',
      advice: { explicitBucketBoundaries: [1, 2, 3, 4, 5, 6, 8, 10, 15, 20] },
    }),
    retries: meter.createCounter('stream_boundary.retries', {
      unit: '{retry}',
      description: 'Failed attempts that another attempt followed, by reason',
    }),
    hedges: meter.createCounter('stream_boundary.hedges', {
      unit: '{hedge}',
      description: 'Hedges started, won and skipped (with the reason)',
    }),
    giveUps: meter.createCounter('stream_boundary.give_ups', {
      unit: '{request}',
      description: 'Requests answered with an error before any output, by status and reason',
    }),
    keyStates: meter.createCounter('stream_boundary.key.state_changes', {
      unit: '{change}',
      description: 'Key state changes in a key pool, by state and reason',
    }),
  }
}

type Instruments = ReturnType<typeof instruments>

/** Sets the GenAI usage attributes of a usage report on `out`. */
function setUsage(out: Attributes, usage: TokenUsage | undefined): void {
  if (usage === undefined) return
  if (usage.inputTokens !== undefined) out['gen_ai.usage.input_tokens'] = usage.inputTokens
  if (usage.outputTokens !== undefined) out['gen_ai.usage.output_tokens'] = usage.outputTokens
  if (usage.cachedInputTokens !== undefined)
    out['gen_ai.usage.cache_read.input_tokens'] = usage.cachedInputTokens
  if (usage.cacheCreationInputTokens !== undefined)
    out['gen_ai.usage.cache_creation.input_tokens'] = usage.cacheCreationInputTokens
  if (usage.reasoningTokens !== undefined)
    out['stream_boundary.usage.reasoning_tokens'] = usage.reasoningTokens
}

/** Sets what every span and metric of a request names on `out`: operation, provider, models. */
function setOperation(out: Attributes, outcome: RelayOutcome): Attributes {
  const protocol = outcome.protocol ?? 'unknown'
  out['gen_ai.operation.name'] = protocol === 'gemini' ? 'generate_content' : 'chat'
  out['gen_ai.provider.name'] = providers[protocol] ?? protocol
  if (outcome.model !== undefined) out['gen_ai.request.model'] = outcome.model
  if (outcome.kind === 'committed' && outcome.response?.model !== undefined)
    out['gen_ai.response.model'] = outcome.response.model
  return out
}

/**
 * Why the request did not end well, when it did not: the GenAI conventions' `error.type`, and
 * the span's `ERROR` status. Set exactly when `outcome.ok` is false, except when the client
 * left (`client-gone`, before or after commit): its leaving is not a failure of the service.
 */
function errorType(outcome: RelayOutcome): string | undefined {
  if (outcome.ok) return undefined
  if (outcome.kind === 'failed') return outcome.reason
  if (outcome.kind === 'client-gone') return undefined
  const { end } = outcome
  if (end.kind === 'completed' || end.kind === 'client-gone') return undefined
  return end.kind === 'error-written' ? end.cause : end.kind
}

// Attributes are set one by one on one object (no spreads): this runs once per request.
function requestSpanAttributes(outcome: RelayOutcome): Attributes {
  const out = setOperation({}, outcome)
  out['stream_boundary.protocol'] = outcome.protocol ?? 'unknown'
  out['stream_boundary.outcome'] = outcome.kind
  out['stream_boundary.ok'] = outcome.ok
  out['stream_boundary.result'] = outcome.result
  out['stream_boundary.attempts'] = outcome.attempts.length
  const error = errorType(outcome)
  if (error !== undefined) out['error.type'] = error
  if (outcome.kind === 'failed') {
    out['http.response.status_code'] = outcome.status
    out['stream_boundary.failure.reason'] = outcome.reason
    return out
  }
  if (outcome.kind !== 'committed') return out
  setUsage(out, outcome.usage)
  out['stream_boundary.route'] = outcome.route
  out['stream_boundary.mode'] = outcome.mode
  out['stream_boundary.end'] = outcome.end.kind
  out['stream_boundary.time_to_first_output_ms'] = Math.round(outcome.timeToFirstOutputMs)
  out['stream_boundary.stalls'] = outcome.stalls.count
  out['stream_boundary.bytes'] = outcome.bytes
  if (outcome.keyId !== null) out['stream_boundary.key.id'] = outcome.keyId
  if (outcome.response?.id !== undefined) out['gen_ai.response.id'] = outcome.response.id
  if (outcome.eof?.kind === 'completed' && outcome.eof.terminal.raw !== null)
    out['gen_ai.response.finish_reasons'] = [outcome.eof.terminal.raw]
  if (outcome.eof !== null) out['stream_boundary.eof'] = outcome.eof.kind
  if (outcome.continuations !== undefined) {
    out['stream_boundary.continuations'] = outcome.continuations.length
    out['stream_boundary.continuations.spliced'] = outcome.continuations.filter(
      (each) => each.result === 'spliced',
    ).length
  }
  if (outcome.hedges !== undefined) {
    out['stream_boundary.hedges.started'] = outcome.hedges.started
    out['stream_boundary.hedges.won'] = outcome.hedges.wonByHedge
  }
  return out
}

function attemptSpanAttributes(record: AttemptRecord): Attributes {
  const out: Attributes = {
    'stream_boundary.attempt.number': record.attemptNumber,
    'stream_boundary.attempt.result': record.result,
    'stream_boundary.attempt.retried': record.retryable,
    'stream_boundary.attempt.mode': record.mode,
    'stream_boundary.route': record.route,
  }
  setUsage(out, record.usage)
  if (record.keyId !== null) out['stream_boundary.key.id'] = record.keyId
  if (record.status !== null) out['http.response.status_code'] = record.status
  if (record.hedgeOf !== undefined) out['stream_boundary.attempt.hedge_of'] = record.hedgeOf
  if (record.result !== 'committed') out['error.type'] = record.result
  return out
}

/**
 * What the host's `content` returns for a request, strings only: it is the host's code, so
 * a throw or a garbage answer records no content rather than losing the request's span.
 */
function contentOf(
  content: RelayTelemetryOptions['content'],
  outcome: RelayOutcome,
): { input?: string; output?: string } {
  let captured: unknown
  try {
    captured = content?.(outcome)
  } catch {
    return {}
  }
  if (typeof captured !== 'object' || captured === null) return {}
  const { input, output } = captured as Record<string, unknown>
  return {
    ...(typeof input === 'string' ? { input } : {}),
    ...(typeof output === 'string' ? { output } : {}),
  }
}

const noContinuations: readonly never[] = []

/** The request's span and its attempts' spans, with their real times. */
function recordSpans(
  tracer: Tracer,
  outcome: RelayOutcome,
  content: RelayTelemetryOptions['content'],
): void {
  const endedAt = Date.now()
  const startedAt = endedAt - outcome.durationMs
  const attributes = requestSpanAttributes(outcome)
  if (content !== undefined) {
    const captured = contentOf(content, outcome)
    if (captured.input !== undefined) attributes['gen_ai.input.messages'] = captured.input
    if (captured.output !== undefined) attributes['gen_ai.output.messages'] = captured.output
  }
  const name = `${attributes['gen_ai.operation.name']}${outcome.model === undefined ? '' : ` ${outcome.model}`}`
  const active = contextApi.active()
  const span = tracer.startSpan(
    name,
    { kind: SpanKind.CLIENT, startTime: startedAt, attributes },
    active,
  )
  const parent = trace.setSpan(active, span)
  for (const record of outcome.attempts) {
    const child = tracer.startSpan(
      `${name} attempt ${record.attemptNumber}`,
      {
        kind: SpanKind.CLIENT,
        startTime: startedAt + record.startedMs,
        attributes: attemptSpanAttributes(record),
      },
      parent,
    )
    if (record.result !== 'committed' && record.result !== 'hedge-lost')
      child.setStatus({ code: SpanStatusCode.ERROR })
    child.end(startedAt + record.startedMs + record.durationMs)
  }
  // Each continuation after a cut is an event on the request's span, at the cut.
  const continuations = outcome.kind === 'committed' ? outcome.continuations : undefined
  for (const each of continuations ?? noContinuations) {
    const event: Attributes = {
      'stream_boundary.continuation.result': each.result,
      'stream_boundary.continuation.cause': each.cause,
      'stream_boundary.continuation.received_chars': each.receivedChars,
      'stream_boundary.continuation.attempts': each.attempts,
    }
    if (each.keyId !== null) event['stream_boundary.key.id'] = each.keyId
    setUsage(event, each.usage)
    span.addEvent('stream_boundary.continuation', event, startedAt + each.atMs)
  }
  if (attributes['error.type'] !== undefined) {
    span.setStatus({
      code: SpanStatusCode.ERROR,
      ...(outcome.kind === 'failed' ? { message: outcome.error.message } : {}),
    })
  }
  span.end(endedAt)
}

/** The attribute sets a request's metrics share, by protocol and models (see {@link metricSets}). */
interface MetricSets {
  /** Operation, provider and models: `attempts`, `time_to_first_chunk`, a duration without error. */
  readonly base: Attributes
  readonly inputTokens: Attributes
  readonly outputTokens: Attributes
}

/** A part of a {@link metricSets} key: its length and itself, or `-` when absent. */
const keyPart = (part: string | undefined): string =>
  part === undefined ? '-' : `${part.length}:${part}`

/** How many protocol-and-models sets are kept; past it the cache starts again (models are the clients'). */
const maxMetricSets = 256

/**
 * The attribute sets of a request's metrics, made once per protocol and models and reused
 * (frozen: the SDK keeps the first one it sees of each as its key). Models come from the
 * client's request, so the cache is bounded and starts again when full.
 */
function metricSets(cache: Map<string, MetricSets>, outcome: RelayOutcome): MetricSets {
  const responseModel = outcome.kind === 'committed' ? outcome.response?.model : undefined
  // Each part length-prefixed, so no two protocol-and-models triples share a key.
  const key = `${keyPart(outcome.protocol)}${keyPart(outcome.model)}${keyPart(responseModel)}`
  const known = cache.get(key)
  if (known !== undefined) return known
  const base = Object.freeze(setOperation({}, outcome))
  const tokens = (type: 'input' | 'output') => {
    const attributes = setOperation({}, outcome)
    attributes['gen_ai.token.type'] = type
    return Object.freeze(attributes)
  }
  const sets: MetricSets = { base, inputTokens: tokens('input'), outputTokens: tokens('output') }
  if (cache.size >= maxMetricSets) cache.clear()
  cache.set(key, sets)
  return sets
}

function recordMetrics(
  meters: Instruments,
  cache: Map<string, MetricSets>,
  outcome: RelayOutcome,
): void {
  const sets = metricSets(cache, outcome)
  const error = errorType(outcome)
  let durationAttributes = sets.base
  if (error !== undefined) {
    durationAttributes = setOperation({}, outcome)
    durationAttributes['error.type'] = error
  }
  meters.duration.record(outcome.durationMs / 1000, durationAttributes)
  meters.attempts.record(outcome.attempts.length, sets.base)
  for (const record of outcome.attempts) {
    if (!record.retryable) continue
    const attributes = setOperation({}, outcome)
    attributes['stream_boundary.reason'] = record.result
    meters.retries.add(1, attributes)
  }
  if (outcome.kind === 'failed') {
    const attributes = setOperation({}, outcome)
    attributes['http.response.status_code'] = outcome.status
    attributes['stream_boundary.reason'] = outcome.reason
    meters.giveUps.add(1, attributes)
    return
  }
  if (outcome.kind !== 'committed') return
  meters.firstChunk.record(outcome.timeToFirstOutputMs / 1000, sets.base)
  const { usage, hedges } = outcome
  if (usage?.inputTokens !== undefined) meters.tokens.record(usage.inputTokens, sets.inputTokens)
  if (usage?.outputTokens !== undefined) meters.tokens.record(usage.outputTokens, sets.outputTokens)
  if (hedges === undefined) return
  const hedge = (kind: string, count: number, reason?: string) => {
    if (count <= 0) return
    const attributes = setOperation({}, outcome)
    attributes['stream_boundary.hedge'] = kind
    if (reason !== undefined) attributes['stream_boundary.reason'] = reason
    meters.hedges.add(count, attributes)
  }
  hedge('started', hedges.started)
  hedge('won', hedges.wonByHedge ? 1 : 0)
  for (const [reason, count] of Object.entries(hedges.skipped)) hedge('skipped', count, reason)
}

const optionKeys = Object.keys({
  tracerProvider: true,
  meterProvider: true,
  content: true,
} satisfies Record<keyof RelayTelemetryOptions, true>)

/**
 * OpenTelemetry for relayed requests: give `telemetry.hooks` to `relay()` or
 * `createResilientFetch()`, and `telemetry.onKeyState` to a key pool. Each request becomes a
 * client span named after its operation and model (`chat gpt-4o`) with a child span per
 * attempt, and feeds the GenAI client metrics (`gen_ai.client.operation.duration`,
 * `gen_ai.client.token.usage`, `gen_ai.client.operation.time_to_first_chunk`) and this
 * library's (`stream_boundary.attempts`, `.retries`, `.hedges`, `.give_ups`,
 * `.key.state_changes`). Spans carry key ids, never secrets; no prompt or completion content
 * unless `content` returns it. A throw inside telemetry never reaches the request.
 *
 * @example
 * import { createRelayTelemetry } from 'stream-boundary/otel'
 * const telemetry = createRelayTelemetry() // the global providers
 * relay({ ..., hooks: telemetry.hooks })
 *
 * @group OpenTelemetry
 */
export function createRelayTelemetry(options: RelayTelemetryOptions = {}): RelayTelemetry {
  rejectUnknownKeys('createRelayTelemetry', options, optionKeys)
  if (options.content !== undefined && typeof options.content !== 'function') {
    throw new TypeError('createRelayTelemetry: content must be a function')
  }
  const tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(
    scope,
    scopeVersion,
  )
  const meters = instruments(
    (options.meterProvider ?? metrics.getMeterProvider()).getMeter(scope, scopeVersion),
  )
  const sets = new Map<string, MetricSets>()
  const onOutcome = (outcome: RelayOutcome): void => {
    recordSpans(tracer, outcome, options.content)
    recordMetrics(meters, sets, outcome)
  }
  const hooks: RelayHooks = Object.freeze({ onOutcome })
  return Object.freeze({
    hooks,
    withHooks(own?: RelayHooks): RelayHooks {
      if (own === undefined) return hooks
      return Object.freeze({
        ...own,
        onOutcome(outcome: RelayOutcome) {
          try {
            own.onOutcome?.(outcome)
          } finally {
            onOutcome(outcome)
          }
        },
      })
    },
    onKeyState(event: KeyStateEvent): void {
      meters.keyStates.add(1, {
        'stream_boundary.key.id': event.keyId,
        'stream_boundary.key.state': event.state,
        'stream_boundary.reason': event.reason,
      })
    },
  })
}
