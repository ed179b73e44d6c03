/**
 * `stream-boundary chaos` against gateways that break the stream itself: one that streams
 * content without end, one whose frame never ends, and one that trickles forever. Each is a
 * real HTTP server on 127.0.0.1; the command must keep its memory bounded and give a verdict
 * (a failed scenario with a reason) in bounded time, never crash.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { maxClientBodyBytes } from '../../src/cli/client.js'
import { runCli } from '../../src/cli/main.js'
import type { ChaosReport } from '../../src/cli/run.js'

const servers: Server[] = []
const dirs: string[] = []
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

/** Writes `next()` for as long as the client takes it (honouring backpressure). */
function pour(res: ServerResponse, next: () => string, pauseMs = 0): void {
  const write = () => {
    if (res.destroyed) return
    while (res.write(next())) {
      if (res.destroyed) return
      if (pauseMs > 0) return void setTimeout(write, pauseMs)
    }
    res.once('drain', write)
  }
  write()
}

const chunk = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${'and on '.repeat(200)}"},"finish_reason":null}]}\n\n`

/** Broken gateways: each answers every request the same way. */
const gateways: Record<string, (res: ServerResponse) => void> = {
  'content without end': (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write(
      'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
    )
    pour(res, () => chunk)
  },
  'a frame that never ends': (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('data: {"choices":[{"index":0,"delta":{"content":"')
    const bytes = 'x'.repeat(64 * 1024)
    pour(res, () => bytes)
  },
}

async function listen(answer: (res: ServerResponse) => void): Promise<string> {
  const server = createServer((req, res) => {
    req.resume()
    answer(res)
  })
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
}

describe('stream-boundary chaos against a gateway that breaks the stream', () => {
  it.each(Object.keys(gateways))(
    '%s: a failed scenario with a reason, in bounded time and memory (no crash)',
    async (name) => {
      const target = await listen(gateways[name] as (res: ServerResponse) => void)
      const dump = mkdtempSync(join(tmpdir(), 'chaos-broken-'))
      dirs.push(dump)
      const out: string[] = []
      const err: string[] = []
      const started = performance.now()
      const code = await runCli(
        [
          'chaos',
          '--target',
          target,
          '--protocol',
          'openai-chat',
          '--scenarios',
          'ok',
          '--hang-ms',
          '20000',
          '--dump',
          dump,
          '--json',
        ],
        { out: (text) => out.push(text), err: (text) => err.push(text) },
      )
      const tookMs = performance.now() - started
      const report = JSON.parse(out.join('\n')) as ChaosReport
      expect(code).toBe(1)
      const row = report.scenarios.find((scenario) => scenario.name === 'ok')
      expect(row).toMatchObject({ mark: '✗', outcome: 'hang' })
      expect(row?.reason).toMatch(/^no end: the body passed 8388608 bytes with no end/)
      // Bounded memory: what the client kept is at most its bound, whatever the gateway sent.
      expect(statSync(join(dump, 'ok.body')).size).toBeLessThanOrEqual(maxClientBodyBytes)
      expect(JSON.parse(readFileSync(join(dump, 'ok.json'), 'utf8')).end).toBe('too-large')
      // Bounded time: the bound on bytes ends it long before the hang bound.
      expect(tookMs).toBeLessThan(15_000)
    },
    30_000,
  )
})
