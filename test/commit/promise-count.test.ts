import { describe, expect, it } from 'vitest'
import { benchPromises } from '../../bench/promises.js'

// A count, not a time: the same on a loaded machine. Every promise costs a host running
// OpenTelemetry's async-hooks context manager a hook call; this bound fails when many come back.
const ceiling = 53

describe('promises per request', () => {
  it(`relay() + webSink() create at most ${ceiling} promises of their own per 1-frame request`, async () => {
    const counted = await benchPromises({ requests: 50 })
    // The host's own work is counted too (and subtracted): a count of nothing would pass anything.
    expect(counted.host).toBeGreaterThan(0)
    expect(counted.relay).toBeGreaterThan(counted.host)
    expect(counted.library).toBeLessThanOrEqual(ceiling)
  })

  it(`a relay built once with createRelay() creates at most ${ceiling} promises of its own per 1-frame request`, async () => {
    const counted = await benchPromises({ requests: 50 })
    expect(counted.compiled).toBeGreaterThan(0)
    expect(counted.compiled).toBeLessThanOrEqual(ceiling)
    // Built once, its requests do no more than relay()'s (which checks every option per call).
    expect(counted.compiled).toBeLessThanOrEqual(counted.library)
  })

  it('relay() + webSink() set one timer per 1-frame request (the first-output clock, the watchdog on it after commit)', async () => {
    const counted = await benchPromises({ requests: 20 })
    // The sink closes at once: its close sets no look timer of the write-stall watchdog; the
    // watchdog takes the first-output clock's timer over at commit instead of setting its own.
    expect(counted.timers).toBeGreaterThan(0)
    expect(counted.timers).toBeLessThanOrEqual(1)
    expect(counted.compiledTimers).toBeGreaterThan(0)
    expect(counted.compiledTimers).toBeLessThanOrEqual(1)
  })
})
