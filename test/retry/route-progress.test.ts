import { describe, expect, it } from 'vitest'
import {
  initialRouteProgress,
  nextRouteProgress,
  type RouteEvent,
  type RouteProgress,
} from '../../src/retry/decisions/route-progress.js'
import type { FailureVerdict } from '../../src/retry/shared/verdict.js'

const verdict = (overload: boolean): FailureVerdict => ({
  retryable: true,
  key: overload ? { kind: 'overloaded' } : { kind: 'server-error' },
  reason: overload ? 'status-529' : 'status-500',
  overload,
  status: overload ? 529 : 502,
  error: { type: 'upstream_error', message: 'x' },
})

const rateLimited: FailureVerdict = {
  ...verdict(true),
  key: { kind: 'rate-limited' },
  reason: 'status-429',
  status: 429,
}

const request = { url: 'https://api.test/v1/chat/completions', body: { stream: true } }
const smaller = { url: request.url, body: { stream: true, max_tokens: 10 } }

/** Applies events in order, checking each step leaves the previous state as it was. */
function replay(events: readonly RouteEvent[]): RouteProgress {
  let state = initialRouteProgress(request)
  for (const event of events) {
    const before = JSON.stringify({ ...state, tried: [...state.tried] })
    const next = nextRouteProgress(state, event)
    expect(JSON.stringify({ ...state, tried: [...state.tried] })).toBe(before)
    state = next
  }
  return state
}

describe('nextRouteProgress: a route advances only by events, never in place', () => {
  const rows: readonly [string, readonly RouteEvent[], Partial<RouteProgress>][] = [
    [
      'a started attempt counts and remembers its key; a hedge does not count; a fallback counts on its own',
      [
        { kind: 'started', keyId: 'a', as: 'attempt' },
        { kind: 'started', keyId: 'b', as: 'hedge' },
        { kind: 'started', keyId: 'c', as: 'fallback' },
      ],
      { attempts: 1, fallbackAttempts: 1 },
    ],
    [
      "after one key's 429 the attempt on an untried key is free; on a tried key, after another failure or as a hedge it counts",
      [
        { kind: 'started', keyId: 'a', as: 'attempt' },
        { kind: 'failed', verdict: rateLimited },
        { kind: 'started', keyId: 'x', as: 'hedge' },
        { kind: 'started', keyId: 'b', as: 'attempt' },
        { kind: 'failed', verdict: rateLimited },
        { kind: 'started', keyId: 'a', as: 'attempt' },
        { kind: 'failed', verdict: verdict(false) },
        { kind: 'started', keyId: 'c', as: 'attempt' },
        { kind: 'failed', verdict: rateLimited },
        { kind: 'started', keyId: 'd', as: 'fallback' },
      ],
      { attempts: 3, fallbackAttempts: 0, rateLimited: false },
    ],
    [
      'consecutive overloads count up; any other failure resets them',
      [
        { kind: 'failed', verdict: verdict(true) },
        { kind: 'failed', verdict: verdict(true) },
      ],
      { overloads: 2, capacityOverloads: 2 },
    ],
    [
      'a 429 counts as an overload, not as the provider at capacity; a 529 after it starts the run again',
      [
        { kind: 'failed', verdict: verdict(true) },
        { kind: 'failed', verdict: rateLimited },
        { kind: 'failed', verdict: verdict(true) },
      ],
      { overloads: 3, capacityOverloads: 1 },
    ],
    [
      'an overload then a server error: 0',
      [
        { kind: 'failed', verdict: verdict(true) },
        { kind: 'failed', verdict: verdict(false) },
      ],
      { overloads: 0, capacityOverloads: 0 },
    ],
    [
      'a retry sets when keys may be reused and the reason onRetry hears; it reuses nothing yet',
      [{ kind: 'retry', reuseAt: 1_234, reason: 'empty' }],
      { reuses: 0, reuseAt: 1_234, retryReason: 'empty' },
    ],
    [
      'onRetry told: the reason is cleared',
      [{ kind: 'retry', reuseAt: 1, reason: 'empty' }, { kind: 'retry-told' }],
      { reuses: 0, retryReason: undefined },
    ],
    [
      'the sweep over untried keys after 429s reuses nothing; each attempt on a tried key is a reuse (issue 55)',
      [
        ...['a', 'b', 'c'].flatMap((keyId): RouteEvent[] => [
          { kind: 'started', keyId, as: 'attempt' },
          { kind: 'failed', verdict: rateLimited },
          { kind: 'retry', reuseAt: 1, reason: 'status-429' },
        ]),
        { kind: 'started', keyId: 'a', as: 'attempt' },
        { kind: 'failed', verdict: rateLimited },
        { kind: 'retry', reuseAt: 2, reason: 'status-429' },
        { kind: 'started', keyId: 'b', as: 'fallback' },
        { kind: 'started', keyId: 'c', as: 'hedge' },
      ],
      { reuses: 2, attempts: 2, fallbackAttempts: 1 },
    ],
    [
      "without a pool every attempt after the first reuses the caller's credentials",
      [
        { kind: 'started', keyId: null, as: 'attempt' },
        { kind: 'failed', verdict: verdict(false) },
        { kind: 'started', keyId: null, as: 'attempt' },
        { kind: 'started', keyId: null, as: 'hedge' },
        { kind: 'started', keyId: null, as: 'fallback' },
      ],
      { reuses: 2, attempts: 2, fallbackAttempts: 1 },
    ],
    [
      'the fallback is used once',
      [{ kind: 'fallback', reason: 'streaming-unsupported' }],
      { fallbackUsed: true, retryReason: 'streaming-unsupported' },
    ],
    [
      'an adjusted request replaces the one sent; a fit tried without result keeps it, and is not tried again',
      [
        { kind: 'adjusted', request: undefined, fitted: true },
        { kind: 'adjusted', request: smaller, fitted: false },
      ],
      { request: smaller, fitted: true },
    ],
  ]
  it.each(rows)('%s', (_name, events, expected) => {
    expect(replay(events)).toMatchObject(expected)
  })

  it('tried keys accumulate without duplicates', () => {
    const state = replay([
      { kind: 'started', keyId: 'a', as: 'attempt' },
      { kind: 'started', keyId: 'a', as: 'attempt' },
      { kind: 'started', keyId: null, as: 'attempt' },
      { kind: 'started', keyId: 'b', as: 'attempt' },
    ])
    expect([...state.tried]).toEqual(['a', 'b'])
    expect(state.attempts).toBe(4)
  })
})
