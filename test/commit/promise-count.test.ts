import { describe, expect, it } from 'vitest'
import { benchPromises } from '../../bench/promises.js'

// A count, not a time: the same on a loaded machine. Every promise costs a host running
// OpenTelemetry's async-hooks context manager a hook call; this bound fails when many come back.
const ceiling = 66

describe('promises per request', () => {
  it(`relay() + webSink() create at most ${ceiling} promises of their own per 1-frame request`, async () => {
    const counted = await benchPromises({ requests: 50 })
    // The host's own work is counted too (and subtracted): a count of nothing would pass anything.
    expect(counted.host).toBeGreaterThan(0)
    expect(counted.relay).toBeGreaterThan(counted.host)
    expect(counted.library).toBeLessThanOrEqual(ceiling)
  })
})
