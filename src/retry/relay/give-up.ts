import { now } from '../../call-safely.js'
import { failBeforeContent } from '../../commit/endings.js'
import { createCommitGate } from '../../commit/gate.js'
import type { DownstreamSink } from '../../commit/gate-options.js'
import { isStreamBoundaryError, isUserCodeError } from '../../errors.js'
import { errorBodyFor, parseObject } from '../../protocols/common.js'
import { redactText } from '../../protocols/sanitize.js'
import type { StreamAdapter } from '../../protocols/types.js'
import type { Run } from '../route/run.js'
import type { UpstreamHttpError } from '../shared/attempt-types.js'
import { callHook } from '../shared/hooks.js'
import type { EngineOutcome, RelayOutcome } from '../shared/outcome.js'
import { guardAdapter } from '../shared/user-code.js'
import type { FailureVerdict } from '../shared/verdict.js'

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

/**
 * Sets what a give-up says about trying again: `retry-after` when waiting helps (429, 503,
 * 529 with a known wait), else `x-should-retry: false` (the library spent its retries: SDKs
 * that honour it do not stack theirs on top).
 */
function setRetryHeaders(headers: Headers, status: number, retryAfterMs: number | undefined): void {
  if (retryAfterMs !== undefined && (status === 429 || status === 503 || status === 529))
    headers.set('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))))
  else headers.set('x-should-retry', 'false')
}

/**
 * A relay's give-up as another protocol's answer, for a gateway that translates outside the
 * relay (it ran `relay()` in the upstream's protocol into a sink of its own, and must answer
 * its client in the client's): the status, a JSON error body in `adapter`'s shape, and the
 * headers the relay itself sends with a give-up: `retry-after` when waiting helps (429, 503,
 * 529), else `x-should-retry: false`, so the client's SDK does not stack its retries on the
 * relay's. Never the upstream's body: its words are in `outcome.error`, sanitised.
 *
 * @example
 * const outcome = await relay({ sink, ... })
 * if (outcome.kind === 'failed' && !res.headersSent) return giveUpResponse(outcome, anthropicMessages)
 *
 * @group Relay
 */
export function giveUpResponse(
  outcome: Omit<Extract<RelayOutcome, { kind: 'failed' }>, 'result'>,
  adapter: StreamAdapter,
): Response {
  const { status, retryAfterMs } = outcome
  const headers = new Headers({ 'content-type': 'application/json' })
  setRetryHeaders(headers, status, retryAfterMs)
  return new Response(errorBodyFor(adapter, { ...outcome.error, status }), { status, headers })
}

/**
 * Ends a request that failed before content: a real status, or in-band with early headers.
 * `keysBackMs`: when the pool expects a key back, for a 429 that said no wait of its own.
 */
export async function giveUp(
  run: Run,
  verdict: FailureVerdict,
  keysBackMs?: number,
): Promise<EngineOutcome> {
  const client = run.config.downstream.adapter
  const adapter = client ?? run.last?.adapter ?? run.adapter
  const retryAfterMs = verdict.retryAfterMs ?? keysBackMs
  const upstream = passThrough(run, verdict)
  // An upstream body in another protocol than the client's is rendered in the client's, with
  // the upstream's status and request ids kept all the same.
  const asItWas = upstream !== undefined && (client === undefined || client === run.last?.adapter)
  const headers = new Headers()
  // The ids of the attempt whose error this is, also when its 2xx stated the error in-band.
  const answered = run.last?.verdict === verdict ? run.last.headers : undefined
  for (const [name, value] of upstream?.headers ?? answered ?? []) {
    // A request id may quote the key (`req_<key>`): by value and by shape, like any header.
    if (passedHeaders.test(name) && (upstream !== undefined || name !== 'content-type'))
      headers.set(name, redactText(value, run.secrets))
  }
  setRetryHeaders(headers, verdict.status, retryAfterMs)
  const status = upstream?.status ?? verdict.status
  run.gaveUp = true
  callHook(run.hooks.onGiveUp, {
    status,
    reason: verdict.reason,
    attempts: run.attempts,
  })
  try {
    if (asItWas) {
      if (!headers.has('content-type')) headers.set('content-type', 'application/json')
      await run.gate.respond(status, upstream.body, headers)
    } else {
      headers.delete('content-type')
      await failBeforeContent(run.gate, adapter, status, { ...verdict.error, status }, headers)
    }
  } catch (error) {
    // Only a downstream failure means the client is gone; anything else (a renderer that
    // threw) goes to the relay's net, which still answers.
    if (run.gate.failure === undefined) throw error
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

/** What an option error is answered with: a `StreamAdapter`'s error renderers, if any. */
function rendererOf(value: unknown): StreamAdapter | undefined {
  const adapter = value as StreamAdapter | undefined
  return typeof adapter?.renderError === 'function' && typeof adapter.inspect === 'function'
    ? adapter
    : undefined
}

/**
 * Answers a request whose `relay()` options were refused, once a sink exists: a host's sink
 * may already own the response (`fastifySink` hijacked the reply), so the client gets a 500
 * in its protocol (`policy.downstream.adapter`, else `adapter`, else plain JSON) naming the
 * option error, never a cut socket. The error's words are the library's own about the
 * host's options; credentials in `secrets` are redacted from them all the same. Never
 * throws: a sink that cannot answer is aborted with the error.
 */
export async function answerRefusedOptions(options: unknown, error: unknown): Promise<void> {
  const given = (typeof options === 'object' && options !== null ? options : {}) as {
    sink?: DownstreamSink
    adapter?: unknown
    policy?: { downstream?: { adapter?: unknown } }
    secrets?: unknown
  }
  const sink = given.sink
  if (typeof sink?.sendHead !== 'function') return
  const secrets = Array.isArray(given.secrets)
    ? given.secrets.filter((each): each is string => typeof each === 'string')
    : []
  const words = error instanceof Error ? error.message : String(error)
  const rendered = {
    type: 'internal_error',
    message: redactText(`the gateway is misconfigured: ${words}`, secrets),
    status: internalStatus,
  }
  const adapter = rendererOf(given.policy?.downstream?.adapter) ?? rendererOf(given.adapter)
  const headers = { 'x-should-retry': 'false' }
  const answer = async () => {
    const gate = createCommitGate(sink)
    try {
      if (adapter === undefined) throw new TypeError('no adapter to render with')
      await failBeforeContent(gate, guardAdapter(adapter), internalStatus, rendered, headers)
    } catch (renderFailed) {
      if (gate.state !== 'open' || isStreamBoundaryError(renderFailed)) throw renderFailed
      await gate.respond(internalStatus, JSON.stringify({ error: rendered }), headers)
    }
  }
  // The sink is the host's: an answer it does not take within the bound is cut after all.
  let timer: ReturnType<typeof setTimeout> | undefined
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(error), refusalAnswerMs)
  })
  try {
    await Promise.race([answer(), bound])
  } catch {
    try {
      sink.abort(error)
    } catch {
      // The sink's own failure does not hide the option's.
    }
  } finally {
    clearTimeout(timer)
  }
}

/** How long the answer to refused options may take before the sink is aborted instead. */
const refusalAnswerMs = 1_000

/** The status of an answer the gateway itself could not give: its own code failed. */
const internalStatus = 500

/**
 * Ends a request whose code threw (a host's adapter, transform or key pool, or a bug): before
 * commit a 500 naming the failing component, after commit the protocol's error frame. A
 * renderer that throws again falls back to a plain JSON body, then to cutting the response:
 * the client always gets an end. Never the thrown error's own words (they may hold anything).
 */
export async function giveUpAfterThrow(run: Run, error: unknown): Promise<EngineOutcome> {
  const component = isUserCodeError(error) ? error.component : 'the relay'
  const reason = `threw:${component}` as const
  const rendered = {
    type: 'internal_error',
    message: `the gateway failed: ${component} threw`,
    status: internalStatus,
  }
  const adapter = run.config.downstream.adapter ?? run.last?.adapter ?? run.adapter
  // Told once: a give-up whose rendering threw was already told.
  if (!run.gaveUp && run.gate.state === 'open') {
    run.gaveUp = true
    callHook(run.hooks.onGiveUp, { status: internalStatus, reason, attempts: run.attempts })
  }
  const gate = run.gate
  const headers = { 'x-should-retry': 'false' }
  try {
    if (gate.state === 'open') {
      try {
        await failBeforeContent(gate, adapter, internalStatus, rendered, headers)
      } catch (renderFailed) {
        if (gate.state !== 'open' || isStreamBoundaryError(renderFailed)) throw renderFailed
        await gate.respond(internalStatus, JSON.stringify({ error: rendered }), headers)
      }
    } else if (gate.state !== 'closed') {
      await gate.write(adapter.renderError(rendered))
      await gate.close()
    }
  } catch (failed) {
    gate.abort(failed)
    if (isStreamBoundaryError(failed) && gate.failure !== undefined) {
      return { kind: 'client-gone', attempts: run.attempts, durationMs: now() - run.started }
    }
  }
  return {
    kind: 'failed',
    attempts: run.attempts,
    status: internalStatus,
    error: rendered,
    reason,
    retryAfterMs: undefined,
    durationMs: now() - run.started,
  }
}
