/**
 * The naive gateway, for comparison: it forwards each request to the upstream, writes the
 * upstream's status and headers at once and pipes the bytes through. No retry, no judgement:
 * whatever the upstream does, the client gets. `npm run demo` and `stream-boundary chaos`
 * use it to show what the failures look like without stream-boundary.
 *
 * Run it:
 *   UPSTREAM_URL=http://127.0.0.1:9000 PORT=8788 node --import tsx examples/plain-relay.ts
 */

import { pathToFileURL } from 'node:url'
import { type ServedFetch, serveFetch } from 'stream-boundary/node'

/** Starts the relay in front of `upstreamUrl` (no trailing slash) on 127.0.0.1. */
export function startPlainRelay(upstreamUrl: string, port = 0): Promise<ServedFetch> {
  return serveFetch(
    async (request) => {
      const url = new URL(request.url)
      const upstream = await fetch(`${upstreamUrl}${url.pathname}${url.search}`, {
        method: request.method,
        headers: request.headers,
        body: await request.text(),
        signal: request.signal,
      })
      return new Response(upstream.body, { status: upstream.status, headers: upstream.headers })
    },
    { port },
  )
}

const entry = process.argv[1]
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  const upstream = process.env.UPSTREAM_URL
  if (upstream === undefined || upstream === '') throw new Error('UPSTREAM_URL is not set')
  const relay = await startPlainRelay(
    upstream.replace(/\/+$/, ''),
    Number(process.env.PORT ?? 8788),
  )
  console.log(`plain relay listening on ${relay.url}, forwarding to ${upstream}`)
}
