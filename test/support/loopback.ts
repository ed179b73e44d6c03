import type { IncomingMessage, Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach } from 'vitest'

/**
 * HTTP servers on 127.0.0.1 for one test file: `listen` starts one on a free port and
 * returns its base URL; it, and whatever `cleanup` was given, is closed after each test, last
 * first.
 */
export function useLoopback() {
  const cleanups: (() => Promise<void>)[] = []
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
  })
  return {
    cleanup(close: () => Promise<void>): void {
      cleanups.push(close)
    },
    async listen(server: Server, options: { backlog?: number } = {}): Promise<string> {
      await new Promise<void>((resolve) =>
        server.listen({ port: 0, host: '127.0.0.1', ...options }, resolve),
      )
      cleanups.push(
        () =>
          new Promise<void>((resolve) => {
            server.close(() => resolve())
            server.closeAllConnections()
          }),
      )
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    },
  }
}

/** Calls `then` with a request's whole body, as text, once it has all arrived. */
export function withBody(req: IncomingMessage, then: (body: string) => void): void {
  let body = ''
  req.setEncoding('utf8')
  req.on('data', (chunk: string) => {
    body += chunk
  })
  req.on('end', () => then(body))
}
