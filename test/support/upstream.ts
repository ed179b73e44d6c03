import type { AttemptContext, AttemptFunction } from '../../src/index.js'
import {
  type ScriptedBody,
  type ScriptStep,
  scriptedBody,
} from '../../src/testing/scripted-body.js'

/** What one scripted attempt does. */
export interface Behaviour {
  readonly status?: number
  readonly headers?: Record<string, string>
  readonly steps?: readonly ScriptStep[]
  /** `fetch` throws this instead of answering. */
  readonly throws?: unknown
}

interface Call {
  readonly keyId: string
  readonly attemptNumber: number
  readonly route: string
  readonly body: ScriptedBody | undefined
  readonly signal: AbortSignal
}

/** An attempt function that follows a script, one behaviour per call (the last repeats). */
export function scriptedUpstream(
  script: readonly Behaviour[] | ((call: number, context: AttemptContext) => Behaviour),
) {
  const calls: Call[] = []
  const attempt: AttemptFunction = async (context) => {
    const index = calls.length
    const behaviour =
      typeof script === 'function'
        ? script(index, context)
        : (script[Math.min(index, script.length - 1)] as Behaviour)
    if (behaviour.throws !== undefined) {
      calls.push({
        keyId: context.key.id,
        attemptNumber: context.attemptNumber,
        route: context.route,
        body: undefined,
        signal: context.signal,
      })
      throw behaviour.throws
    }
    const body = scriptedBody(behaviour.steps ?? [])
    calls.push({
      keyId: context.key.id,
      attemptNumber: context.attemptNumber,
      route: context.route,
      body,
      signal: context.signal,
    })
    return new Response(body.stream, {
      status: behaviour.status ?? 200,
      headers: { 'content-type': 'text/event-stream', ...behaviour.headers },
    })
  }
  return { attempt, calls }
}
