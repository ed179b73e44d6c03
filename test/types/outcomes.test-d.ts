import type {
  AttemptRecord,
  EofClass,
  FailureReason,
  FrameTooLargeError,
  PeekOutcome,
  PeekOverflowError,
  PumpEnd,
  RelayOutcome,
  RelayResult,
  StreamTimeoutError,
  UpstreamReadError,
} from 'stream-boundary'
import type {
  AcquireResult,
  AttemptResultName,
  FrameVerdict,
  KeyLease,
  RenderableError,
  TerminalInfo,
  UpstreamErrorInfo,
} from 'stream-boundary/advanced'
import { describe, expectTypeOf, it } from 'vitest'

/** Fails to compile when a union gains a kind a `switch` does not handle. */
function exhaustive(value: never): never {
  throw new Error(`unhandled ${String(value)}`)
}

describe('discriminated unions narrow on kind', () => {
  it('PeekOutcome', () => {
    const handle = (outcome: PeekOutcome): string => {
      switch (outcome.kind) {
        case 'output':
          expectTypeOf(outcome.trigger).toEqualTypeOf<'output' | 'terminal' | 'bound'>()
          expectTypeOf(outcome.verdict).toEqualTypeOf<FrameVerdict>()
          // @ts-expect-error only the EOF kinds carry `eof`
          void outcome.eof
          return 'commit'
        case 'empty':
        case 'thinking-only':
          expectTypeOf(outcome.eof).toEqualTypeOf<EofClass>()
          return 'retry'
        case 'error-frame':
          expectTypeOf(outcome.error).toEqualTypeOf<UpstreamErrorInfo>()
          expectTypeOf(outcome.error.retryable).toBeBoolean()
          return 'maybe'
        case 'first-byte-timeout':
        case 'first-output-timeout':
        case 'silence-timeout':
          expectTypeOf(outcome.error).toEqualTypeOf<StreamTimeoutError>()
          expectTypeOf(outcome.partialFrameBytes).toBeNumber()
          return 'retry'
        case 'peek-overflow':
          expectTypeOf(outcome.error).toEqualTypeOf<PeekOverflowError | FrameTooLargeError>()
          return 'retry'
        case 'read-error':
          expectTypeOf(outcome.error).toEqualTypeOf<UpstreamReadError>()
          return 'retry'
        case 'aborted':
          expectTypeOf(outcome.reason).toBeUnknown()
          // @ts-expect-error an abort has a reason, not an error
          void outcome.error
          return 'stop'
        default:
          return exhaustive(outcome)
      }
    }
    expectTypeOf(handle).returns.toBeString()
  })

  it('RelayOutcome', () => {
    const handle = (outcome: RelayOutcome): number => {
      switch (outcome.kind) {
        case 'committed':
          expectTypeOf(outcome.keyId).toEqualTypeOf<string | null>()
          expectTypeOf(outcome.end).toEqualTypeOf<PumpEnd>()
          expectTypeOf(outcome.eof).toEqualTypeOf<EofClass | null>()
          // @ts-expect-error a committed request has no failure status
          void outcome.status
          return 200
        case 'failed':
          expectTypeOf(outcome.status).toBeNumber()
          expectTypeOf(outcome.error).toEqualTypeOf<RenderableError>()
          expectTypeOf(outcome.retryAfterMs).toEqualTypeOf<number | undefined>()
          return outcome.status
        case 'client-gone':
          // @ts-expect-error nobody is left to tell a key id
          void outcome.keyId
          return outcome.attempts.length
        default:
          return exhaustive(outcome)
      }
    }
    expectTypeOf(handle).returns.toBeNumber()
  })

  it('RelayOutcome.result: one word on every kind, each kind naming only its own', () => {
    expectTypeOf<RelayOutcome['result']>().toEqualTypeOf<RelayResult>()
    expectTypeOf<Extract<RelayOutcome, { kind: 'committed' }>['result']>().toEqualTypeOf<
      'completed' | 'cut' | 'client-gone' | 'aborted'
    >()
    expectTypeOf<Extract<RelayOutcome, { kind: 'failed' }>['result']>().toEqualTypeOf<
      'refused' | 'failed'
    >()
    const handle = (outcome: RelayOutcome): string => {
      switch (outcome.result) {
        case 'completed':
        case 'cut':
        case 'aborted':
          expectTypeOf(outcome.kind).toEqualTypeOf<'committed'>()
          return outcome.end.kind
        case 'refused':
        case 'failed':
          expectTypeOf(outcome.kind).toEqualTypeOf<'failed'>()
          return String(outcome.status)
        case 'client-gone':
          return outcome.kind
        default:
          return exhaustive(outcome)
      }
    }
    expectTypeOf(handle).returns.toBeString()
  })

  it('RelayOutcome.ok: a plain boolean on every kind, false by type where no answer went out', () => {
    expectTypeOf<RelayOutcome['ok']>().toEqualTypeOf<boolean>()
    expectTypeOf<Extract<RelayOutcome, { kind: 'committed' }>['ok']>().toEqualTypeOf<boolean>()
    expectTypeOf<Extract<RelayOutcome, { kind: 'failed' }>['ok']>().toEqualTypeOf<false>()
    expectTypeOf<Extract<RelayOutcome, { kind: 'client-gone' }>['ok']>().toEqualTypeOf<false>()
    // `ok` narrows: a complete answer is a committed one, with its end and key.
    const answered = (outcome: RelayOutcome) => {
      if (!outcome.ok) return undefined
      expectTypeOf(outcome.kind).toEqualTypeOf<'committed'>()
      expectTypeOf(outcome.end).toEqualTypeOf<PumpEnd>()
      return outcome.keyId
    }
    expectTypeOf(answered).returns.toEqualTypeOf<string | null | undefined>()
    // @ts-expect-error `ok` is the library's to say, not the host's to set
    const forged: RelayOutcome = { kind: 'client-gone', ok: true, attempts: [], durationMs: 0 }
    void forged
  })

  it('FrameVerdict', () => {
    const handle = (verdict: FrameVerdict): string => {
      switch (verdict.kind) {
        case 'text':
        case 'tool':
        case 'reasoning':
        case 'refusal':
          expectTypeOf(verdict.text).toBeString()
          expectTypeOf(verdict.terminal).toEqualTypeOf<TerminalInfo | undefined>()
          return verdict.text
        case 'terminal':
          expectTypeOf(verdict.terminal).toEqualTypeOf<TerminalInfo>()
          return 'end'
        case 'error':
          expectTypeOf(verdict.error).toEqualTypeOf<UpstreamErrorInfo>()
          return verdict.error.message
        case 'meta':
        case 'keepalive':
          // @ts-expect-error nothing to see has no text
          void verdict.text
          return ''
        default:
          return exhaustive(verdict)
      }
    }
    expectTypeOf(handle).returns.toBeString()
  })

  it('EofClass', () => {
    const handle = (eof: EofClass): string => {
      switch (eof.kind) {
        case 'completed':
          expectTypeOf(eof.terminal).toEqualTypeOf<TerminalInfo>()
          return 'ok'
        case 'error-only':
          expectTypeOf(eof.error).toEqualTypeOf<UpstreamErrorInfo>()
          return eof.error.type
        case 'partial':
        case 'thinking-only':
        case 'empty':
          // @ts-expect-error only completed streams have a terminal
          void eof.terminal
          return eof.kind
        default:
          return exhaustive(eof)
      }
    }
    expectTypeOf(handle).returns.toBeString()
  })

  it('AcquireResult', () => {
    const handle = (result: AcquireResult): number => {
      switch (result.kind) {
        case 'leased':
          expectTypeOf(result.lease).toEqualTypeOf<KeyLease>()
          return 0
        case 'cooling':
          expectTypeOf(result.retryInMs).toBeNumber()
          return result.retryInMs
        case 'busy':
          return result.retryInMs ?? 0
        case 'unavailable':
          expectTypeOf(result.reason).toEqualTypeOf<'no-keys' | 'all-disabled' | 'all-excluded'>()
          // @ts-expect-error no lease without a key
          void result.lease
          return -1
        default:
          return exhaustive(result)
      }
    }
    expectTypeOf(handle).returns.toBeNumber()
  })
})

describe('closed sets of strings are unions, not string', () => {
  it('AttemptRecord.result and the failure reasons', () => {
    expectTypeOf<AttemptRecord['result']>().toEqualTypeOf<AttemptResultName>()
    expectTypeOf<string>().not.toMatchTypeOf<AttemptResultName>()
    expectTypeOf<'status-429'>().toMatchTypeOf<FailureReason>()
    expectTypeOf<'empty:request-adjusted'>().toMatchTypeOf<FailureReason>()
    expectTypeOf<'emptyy'>().not.toMatchTypeOf<FailureReason>()
    expectTypeOf<Extract<RelayOutcome, { kind: 'failed' }>['reason']>().not.toEqualTypeOf<string>()
  })
})
