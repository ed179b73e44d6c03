import type { Server } from 'node:http'
import { serve } from '@hono/node-server'
import { createApp } from '../../examples/hono-gateway.js'
import type { GatewayConfig } from '../../examples/node-http-gateway.js'
import type { RelayOutcome } from '../../src/index.js'

/** A gateway under test, started on an ephemeral port on 127.0.0.1. */
export interface RunningGateway {
  readonly url: string
  readonly outcomes: RelayOutcome[]
  close(): Promise<void>
}

/** The Hono example gateway served with @hono/node-server, recording every relay outcome. */
export async function startHonoGateway(
  config: Omit<GatewayConfig, 'port'>,
): Promise<RunningGateway> {
  const outcomes: RelayOutcome[] = []
  const app = createApp({ ...config, hooks: { onOutcome: (outcome) => outcomes.push(outcome) } })
  const server = await new Promise<Server>((resolve) => {
    const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () =>
      resolve(started as Server),
    )
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return {
    url: `http://127.0.0.1:${address.port}`,
    outcomes,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}
