import type {
  DownstreamClosedError,
  PumpEnd,
  StreamTimeoutError,
  TimeoutKind,
} from 'stream-boundary'
import type { CommitGate } from 'stream-boundary/advanced'
import { commitGateDefaults, peekDefaults, pumpDefaults } from 'stream-boundary/advanced'
import { describe, expectTypeOf, it } from 'vitest'

function exhaustive(value: never): never {
  throw new Error(`unhandled ${String(value)}`)
}

describe('timeouts in the public types', () => {
  it('PumpEnd tells a stalled client from a closed one, and both from upstream endings', () => {
    const handle = (end: PumpEnd): string => {
      switch (end.kind) {
        case 'downstream-stalled':
          expectTypeOf(end.error).toEqualTypeOf<StreamTimeoutError>()
          return end.error.timeout
        case 'client-gone':
          expectTypeOf(end.error).toEqualTypeOf<DownstreamClosedError>()
          return end.error.reason
        case 'completed':
        case 'upstream-error':
        case 'stop-synthesized':
        case 'reasoning-promoted':
        case 'error-written':
        case 'aborted':
          return end.kind
        default:
          return exhaustive(end)
      }
    }
    expectTypeOf(handle).returns.toBeString()
  })

  it('the watchdogs, the defaults and the gate backpressure flag', () => {
    expectTypeOf<TimeoutKind>().toEqualTypeOf<
      'first-byte' | 'first-output' | 'silence' | 'idle' | 'write-stall' | 'deadline'
    >()
    expectTypeOf(peekDefaults.firstByteTimeoutMs).toBeNumber()
    expectTypeOf(peekDefaults.firstOutputTimeoutMs).toBeNumber()
    expectTypeOf(peekDefaults.silenceTimeoutMs).toBeNumber()
    expectTypeOf(pumpDefaults.idleTimeoutMs).toBeNumber()
    expectTypeOf(pumpDefaults.writeStallTimeoutMs).toBeNumber()
    expectTypeOf(commitGateDefaults.writeStallTimeoutMs).toBeNumber()
    expectTypeOf<CommitGate['writePending']>().toBeBoolean()
  })
})
