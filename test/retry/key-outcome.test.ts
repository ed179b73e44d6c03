import { describe, expect, it } from 'vitest'
import type { PumpEnd } from '../../src/commit/pump-policy.js'
import { DownstreamClosedError, StreamTimeoutError } from '../../src/errors.js'
import { keyOutcomeOf } from '../../src/retry/attempt/attempt.js'

/**
 * What a committed attempt tells its key, for every way a pumped stream ends: the
 * upstream's own ends say the key works; the client's or the host's say nothing of it. The
 * function is exhaustive over `PumpEnd['kind']` (a new kind does not compile until named);
 * this table pins each answer.
 */
describe('keyOutcomeOf: every pump end, named', () => {
  const error = { type: 'upstream_error', message: 'x' }
  const rows: readonly [PumpEnd, 'success' | 'client-gone'][] = [
    [{ kind: 'completed' }, 'success'],
    [{ kind: 'upstream-error' }, 'success'],
    [{ kind: 'stop-synthesized' } as PumpEnd, 'success'],
    [{ kind: 'reasoning-promoted' } as PumpEnd, 'success'],
    [{ kind: 'error-written', cause: 'partial-eof', error } as PumpEnd, 'success'],
    [
      { kind: 'client-gone', error: new DownstreamClosedError('client-gone') } as PumpEnd,
      'client-gone',
    ],
    [
      { kind: 'downstream-stalled', error: new StreamTimeoutError('write-stall', 1) },
      'client-gone',
    ],
    [{ kind: 'aborted', reason: 'shutdown' }, 'client-gone'],
  ]
  it.each(rows)('%j → %s', (end, expected) => {
    expect(keyOutcomeOf(end)).toEqual({ kind: expected })
  })
})
