import { describe, expect, it } from 'vitest'
import { createResilientFetch, isRequestBodyTooLargeError, RequestBodyTooLargeError, readRequestBody } from '../../src/index.js'
import { requestBodyDefaults, resilientFetchDefaults } from '../../src/advanced.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

const chunkBytes = 64 * 1024

/** A request body of `totalBytes` made on demand, fresh memory per chunk; counts what was pulled. */
function producedBody(totalBytes: number, onPull?: () => void) {
  const state = { pulled: 0, cancelled: false }
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (state.pulled >= totalBytes) return controller.close()
      const chunk = new Uint8Array(Math.min(chunkBytes, totalBytes - state.pulled)).fill(0x61)
      state.pulled += chunk.byteLength
      controller.enqueue(chunk)
      onPull?.()
    },
    cancel() {
      state.cancelled = true
    },
  })
  return { stream, state }
}

/** A resilient fetch over an in-process upstream that records whether it was ever called. */
function fetchOver(maxRequestBodyBytes?: number) {
  const upstream = createFaultyUpstream()
  const calls = { count: 0 }
  const fetch = createResilientFetch({
    fetch: (input, init) => {
      calls.count++
      return upstream.fetch(input, init)
    },
    ...(maxRequestBodyBytes === undefined ? {} : { maxRequestBodyBytes }),
  })
  return { fetch, calls }
}

const url = 'http://upstream.test/v1/chat/completions'

describe('request body bound', () => {
  it('defaults to 32 MiB, the Messages limit Anthropic documents', () => {
    expect(requestBodyDefaults.maxRequestBodyBytes).toBe(33_554_432)
    expect(resilientFetchDefaults.maxRequestBodyBytes).toBe(33_554_432)
  })

  it('createResilientFetch refuses a declared content-length past the bound before reading or sending anything', async () => {
    const { fetch, calls } = fetchOver(1024)
    const { stream, state } = producedBody(4096)
    const error = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': '4096' },
      body: stream,
      duplex: 'half',
    } as RequestInit).catch((e: unknown) => e)
    expect(isRequestBodyTooLargeError(error)).toBe(true)
    expect(error).toBeInstanceOf(RequestBodyTooLargeError)
    expect(error).toMatchObject({ code: 'REQUEST_BODY_TOO_LARGE', limit: 1024 })
    expect(calls.count).toBe(0)
    // One chunk at most: the stream's own read-ahead, never a read loop.
    expect(state.pulled).toBeLessThanOrEqual(chunkBytes)
  })

  it('createResilientFetch reads a streamed body no further than the bound, cancels it, and names the limit, never the body', async () => {
    const limit = 256 * 1024
    const { fetch, calls } = fetchOver(limit)
    const { stream, state } = producedBody(8 * 1024 * 1024)
    const error = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit).catch((e: unknown) => e)
    expect(error).toMatchObject({ name: 'RequestBodyTooLargeError', limit })
    expect((error as Error).message).toBe(
      'The request body exceeded maxRequestBodyBytes (262144 bytes); it was not sent upstream',
    )
    expect(calls.count).toBe(0)
    // The bound, the chunk that crossed it, and at most one chunk of read-ahead.
    expect(state.pulled).toBeLessThanOrEqual(limit + 2 * chunkBytes)
    expect(state.cancelled).toBe(true)
  })

  it('a body at the bound passes, one byte over does not', async () => {
    const body = JSON.stringify({ model: 'm', messages: [], stream: false })
    const size = new TextEncoder().encode(body).byteLength
    const exact = fetchOver(size)
    const answer = await exact.fetch(url, { method: 'POST', body })
    expect(answer.status).toBe(200)
    expect(exact.calls.count).toBe(1)
    const under = fetchOver(size - 1)
    await expect(under.fetch(url, { method: 'POST', body })).rejects.toMatchObject({
      code: 'REQUEST_BODY_TOO_LARGE',
      limit: size - 1,
    })
    expect(under.calls.count).toBe(0)
  })

  it('20 concurrent oversized streamed bodies keep memory bounded', async () => {
    const limit = 1024 * 1024
    const oversized = 16 * 1024 * 1024
    const { fetch, calls } = fetchOver(limit)
    const before = process.memoryUsage()
    let peak = 0
    // Sampled on every pull: the reads run on microtasks, where a timer would never fire.
    const sample = () => {
      const now = process.memoryUsage()
      peak = Math.max(peak, now.heapUsed + now.arrayBuffers - before.heapUsed - before.arrayBuffers)
    }
    const bodies = Array.from({ length: 20 }, () => producedBody(oversized, sample))
    const results = await Promise.allSettled(
      bodies.map(({ stream }) =>
        fetch(url, { method: 'POST', body: stream, duplex: 'half' } as RequestInit),
      ),
    )
    expect(
      results.every((r) => r.status === 'rejected' && isRequestBodyTooLargeError(r.reason)),
    ).toBe(true)
    expect(calls.count).toBe(0)
    const pulled = bodies.reduce((sum, { state }) => sum + state.pulled, 0)
    // Unbounded, the 20 bodies would be 320 MiB; bounded, each stops a chunk or two past 1 MiB.
    expect(pulled).toBeLessThanOrEqual(20 * (limit + 2 * chunkBytes))
    expect(peak).toBeLessThan(96 * 1024 * 1024)
    console.info(
      `20 oversized clients: ${(pulled / 2 ** 20).toFixed(1)} MiB read of ${(20 * oversized) / 2 ** 20} MiB offered, peak heap+arrayBuffers delta ${(peak / 2 ** 20).toFixed(1)} MiB`,
    )
  })

  it('readRequestBody: an exact option message, and undefined for no body', async () => {
    await expect(readRequestBody(null, { maxRequestBodyBytes: 0 })).rejects.toThrow(
      'maxRequestBodyBytes must be a positive integer, got 0',
    )
    await expect(readRequestBody(null)).resolves.toBeUndefined()
    expect(() => createResilientFetch({ maxRequestBodyBytes: 1.5 })).toThrow(
      'maxRequestBodyBytes must be a positive integer, got 1.5',
    )
  })

  it('readRequestBody leaves an overflowing stream unlocked and uncancelled, for the host to decide', async () => {
    const { stream, state } = producedBody(1024 * 1024)
    await expect(readRequestBody(stream, { maxRequestBodyBytes: 100_000 })).rejects.toMatchObject({
      limit: 100_000,
    })
    expect(stream.locked).toBe(false)
    expect(state.cancelled).toBe(false)
  })
})
