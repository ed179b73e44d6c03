/**
 * The example gateway (examples/node-http-gateway.ts, at its defaults: `node:http` attempts)
 * served alone, for bench/runtimes.ts: built by scripts/bench.mjs as a user's bundle would be,
 * and run by Node or by Bun.
 */

import { startGateway } from '../examples/node-http-gateway.js'
import { serveControl } from './served-control.js'

const upstream = process.argv[2]
if (upstream === undefined) throw new Error('usage: served-gateway <upstream url>')
const gateway = await startGateway({
  openaiBaseUrl: `${upstream}/v1`,
  anthropicBaseUrl: upstream,
  keys: [{ id: 'bench', secret: 'sk-bench-not-real' }],
  policy: { keepAliveIntervalMs: Number.POSITIVE_INFINITY },
})
serveControl(gateway.url)
