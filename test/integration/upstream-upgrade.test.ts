/**
 * An upstream that answers `101 Switching Protocols` to a plain POST: Node's client emits only
 * `upgrade` (or, with no listener, `close`) for it, never a response or an error. Both ready
 * attempts settle with an upstream failure (502 after the retries), and every lease returns.
 */

import { createServer, type Socket } from 'node:net'
import { createMemoryKeyPool, fetchAttempt, openaiChat, relay } from 'stream-boundary'
import { nodeHttpAttempt } from 'stream-boundary/node'
import { createRecordingSink } from 'stream-boundary/testing'
import { afterEach, describe, expect, it } from 'vitest'
import { leaseTotals } from '../support/leases.js'

const servers: { close(): void }[] = []
afterEach(() => {
  for (const server of servers.splice(0)) server.close()
})

/** A TCP server that answers every request with a 101 and keeps the socket open. */
async function upgradingUpstream(): Promise<{ url: string; requests: () => number }> {
  let requests = 0
  const sockets = new Set<Socket>()
  const server = createServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => {})
    socket.once('data', () => {
      requests++
      socket.write(
        'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n',
      )
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  servers.push({
    close: () => {
      for (const socket of sockets) socket.destroy()
      server.close()
    },
  })
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, requests: () => requests }
}

describe.each([
  ['nodeHttpAttempt', nodeHttpAttempt],
  ['fetchAttempt', fetchAttempt],
] as const)('%s against an upstream answering 101', (_name, make) => {
  it('settles as an upstream failure, retried, then a 502; every lease returns', async () => {
    const upstream = await upgradingUpstream()
    const pool = createMemoryKeyPool([
      { id: 'a', secret: 'sk-upgrade-a-0123456789' },
      { id: 'b', secret: 'sk-upgrade-b-0123456789' },
    ])
    const sink = createRecordingSink()
    const started = performance.now()
    const outcome = await relay({
      sink,
      pool,
      adapter: openaiChat,
      request: {
        url: `${upstream.url}/v1/chat/completions`,
        body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
      },
      attempt: make(),
      policy: { maxAttempts: 2, backoff: { baseMs: 1, maxMs: 2 } },
    })
    expect(performance.now() - started).toBeLessThan(2_000)
    expect(outcome).toMatchObject({ kind: 'failed', status: 502 })
    expect(outcome.attempts).toHaveLength(2)
    expect(upstream.requests()).toBe(2)
    expect(sink.status).toBe(502)
    expect(await leaseTotals(pool)).toMatchObject({ inflight: 0, leased: 2, reported: 2 })
  }, 5_000)
})
