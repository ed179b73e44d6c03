/**
 * A relay under test for the HTTP benchmark, run in its own process so its CPU time is its
 * own: `raw` pipes bytes (a typical proxy), `gateway` is examples/node-http-gateway.ts.
 * Prints its URL on IPC, answers `cpu` with `process.cpuUsage()`.
 */

import { createServer, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { startGateway } from '../examples/node-http-gateway.js'

const [mode, upstream] = process.argv.slice(2)
if (upstream === undefined || (mode !== 'raw' && mode !== 'gateway')) throw new Error('usage: http-proxy.ts raw|gateway <upstream url>')

async function startRaw(target: string): Promise<string> {
  const server = createServer((req, res) => {
    const forward = httpRequest(`${target}${req.url ?? '/'}`, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    })
    forward.on('error', () => res.destroy())
    req.pipe(forward)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const url =
  mode === 'raw'
    ? await startRaw(upstream)
    : (await startGateway({ openaiBaseUrl: `${upstream}/v1`, anthropicBaseUrl: upstream, keys: [{ id: 'bench', secret: 'sk-bench-not-real' }], policy: { keepAliveIntervalMs: 0 } })).url

process.send?.({ url })
process.on('message', (message) => {
  if (message === 'cpu') process.send?.({ cpu: process.cpuUsage() })
  if (message === 'exit') process.exit(0)
})
