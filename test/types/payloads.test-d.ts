import type { KeyStateEvent, RelayHooks, RelayOutcome } from 'stream-boundary'
import { describe, expectTypeOf, it } from 'vitest'

/**
 * What hooks and outcomes may carry, pinned at the type level: no field anywhere in them is
 * a credential or a request body. A new field named like one fails this file.
 */

/** Every property name reachable in `T` (through objects, arrays and unions). */
type DeepKeys<T, Depth extends unknown[] = []> = Depth['length'] extends 6
  ? never
  : T extends readonly (infer E)[]
    ? DeepKeys<E, [...Depth, 1]>
    : T extends Headers | Error | Uint8Array
      ? never
      : T extends object
        ? { [K in keyof T & string]: K | DeepKeys<T[K], [...Depth, 1]> }[keyof T & string]
        : never

type HookPayload<K extends keyof RelayHooks> = Parameters<NonNullable<RelayHooks[K]>>[0]
type Payloads =
  | HookPayload<'onAttempt'>
  | HookPayload<'onRetry'>
  | HookPayload<'onHedge'>
  | HookPayload<'onCommit'>
  | HookPayload<'onContinuation'>
  | HookPayload<'onGiveUp'>
  | HookPayload<'onOutcome'>
  | RelayOutcome
  | KeyStateEvent

/** Names that would hold a credential or an end user's prompt. */
type Forbidden =
  | 'secret'
  | 'apiKey'
  | 'api_key'
  | 'authorization'
  | 'token'
  | 'password'
  | 'body'
  | 'messages'
  | 'prompt'
  | 'input'
  | 'request'

describe('hook payloads and outcomes', () => {
  it('have no field that can hold a secret or a request body', () => {
    expectTypeOf<Extract<DeepKeys<Payloads>, Forbidden>>().toEqualTypeOf<never>()
  })

  it('the check sees nested fields (it would catch a secret on a key or in attempts)', () => {
    type Probe = { attempts: readonly { key: { secret: string } }[] }
    expectTypeOf<Extract<DeepKeys<Probe>, Forbidden>>().toEqualTypeOf<'secret'>()
  })
})
