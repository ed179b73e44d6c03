import { Server } from 'node:net'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

const upstream = createFaultyUpstream()

afterEach(async () => {
  vi.restoreAllMocks()
  await upstream.close()
})

/** The port and address each `listen()` on a Node server was asked for. */
function recordBinds() {
  const listen = vi.spyOn(Server.prototype, 'listen')
  return () => listen.mock.calls.map(([port, host]) => [port, host])
}

describe('createFaultyUpstream().listen', () => {
  it('binds to 127.0.0.1 and an ephemeral port by default, and answers there', async () => {
    const binds = recordBinds()
    const url = await upstream.listen()
    expect(binds()).toEqual([[0, '127.0.0.1']])
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'm', messages: [], stream: false }),
    })
    expect(response.status).toBe(200)
  })

  it('still binds to 127.0.0.1 when only a port is given, as a number or an option', async () => {
    const binds = recordBinds()
    const port = Number(new URL(await upstream.listen()).port)
    await upstream.close()
    await upstream.listen(port)
    await upstream.close()
    await upstream.listen({ port })
    expect(binds()).toEqual([
      [0, '127.0.0.1'],
      [port, '127.0.0.1'],
      [port, '127.0.0.1'],
    ])
  })

  it('binds to another address only when the host option asks for it', async () => {
    const binds = recordBinds()
    const url = await upstream.listen({ host: 'localhost' })
    expect(binds()).toEqual([[0, 'localhost']])
    expect(url).toMatch(/^http:\/\/localhost:\d+$/)
  })
})
