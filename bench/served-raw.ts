/**
 * The raw byte pipe (a typical `node:http` proxy) served alone, for bench/runtimes.ts: it
 * imports nothing of the library, so its memory is the runtime's and the pipe's own.
 */

import { createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { serveControl } from './served-control.js'

const target = process.argv[2]
if (target === undefined) throw new Error('usage: served-raw <upstream url>')
const server = createServer((req, res) => {
  const forward = request(
    `${target}${req.url ?? '/'}`,
    { method: req.method, headers: req.headers },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    },
  )
  forward.on('error', () => res.destroy())
  req.pipe(forward)
})
server.listen(0, '127.0.0.1', () => {
  serveControl(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
})
