/**
 * Invariant 12, end to end: a script awaiting one request neither exits in the middle of a
 * retry (an unref'd timer would let Node end with code 13, "unsettled top-level await") nor
 * hangs after it (a timer left behind would hold it). The upstream runs here on 127.0.0.1; the
 * client is a child `node` process whose event loop holds nothing but that one request.
 */
import { spawn } from 'node:child_process'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const chunk = (content: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}\n\n`
const answerStream = `${chunk('Hello')}${chunk(', world')}data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n`

type Failure = '503' | '429' | 'empty'

/** The first request of each run fails as its scenario says; the next one answers. */
function startUpstream(): Promise<{ server: Server; url: string; calls: Map<string, number> }> {
  const calls = new Map<string, number>()
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const [, scenario, run] = (req.url ?? '').split('/') as [string, Failure, string]
      const count = (calls.get(run) ?? 0) + 1
      calls.set(run, count)
      if (count === 1 && scenario === '503') {
        res.writeHead(503, { 'content-type': 'application/json' })
        res.end('{"error":{"message":"overloaded","type":"server_error"}}')
        return
      }
      if (count === 1 && scenario === '429') {
        res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' })
        res.end('{"error":{"message":"slow down","type":"rate_limit_error"}}')
        return
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      // An empty stream: a 200 that ends before any frame (a proxy killed the tunnel).
      res.end(count === 1 && scenario === 'empty' ? '' : answerStream)
    })
  })
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo
      resolve({ server, url: `http://127.0.0.1:${port}`, calls })
    })
  })
}

interface ChildRun {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
  /** Wall-clock time the child reported the request settled. */
  readonly settledAt: number | undefined
  readonly exitedAt: number
}

const root = fileURLToPath(new URL('../..', import.meta.url))

function runChild(script: string, url: string): Promise<ChildRun> {
  const path = fileURLToPath(new URL(`./process-lifetime/${script}`, import.meta.url))
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path, url], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (data: Buffer) => {
      stdout += data.toString()
    })
    child.stderr.on('data', (data: Buffer) => {
      stderr += data.toString()
    })
    child.on('error', reject)
    child.on('exit', (code) => {
      const exitedAt = Date.now()
      const settled = /^settled (\d+)$/m.exec(stdout)?.[1]
      resolve({
        code,
        stdout,
        stderr,
        settledAt: settled === undefined ? undefined : Number(settled),
        exitedAt,
      })
    })
  })
}

let upstream: Awaited<ReturnType<typeof startUpstream>>
beforeAll(async () => {
  upstream = await startUpstream()
})
afterAll(async () => {
  upstream.server.closeAllConnections()
  await new Promise((resolve) => upstream.server.close(resolve))
})

/**
 * Exit within this long after the request settled. On an idle machine it is ~5-70 ms; the
 * bound leaves room for a loaded CI box while still far below any timer the library arms
 * (the shortest, the gate's keep-alive, is 15 s). The `holding` line is the exact check.
 */
const exitBudgetMs = 1_000

const cases: readonly [string, Failure][] = [
  ['503, then an answer', '503'],
  ['429 with retry-after: 1, then an answer', '429'],
  ['an empty stream on a one-key pool, then an answer', 'empty'],
]

describe.each([
  ['createResilientFetch', 'resilient-fetch.script.ts'],
  ['relay() into webSink', 'relay-web-sink.script.ts'],
])('a script awaiting one %s request', (_name, script) => {
  it.each(cases)(
    '%s: waits out the retry, prints the whole answer, exits 0 right after',
    async (_case, failure) => {
      const run = `${script}-${failure}`
      const result = await runChild(script, `${upstream.url}/${failure}/${run}/v1/chat/completions`)
      expect(result.stderr).toBe('')
      expect(result.code).toBe(0)
      expect(result.stdout).toMatch(/^status 200$/m)
      expect(result.stdout).toMatch(/^answer Hello, world$/m)
      expect(upstream.calls.get(run)).toBe(2)
      expect(result.settledAt).toBeDefined()
      // Nothing but the stdio pipes is left once the request settled: no timer, no socket.
      expect(result.stdout).toMatch(/^holding ((PipeWrap|TTYWrap),?)*$/m)
      const lingerMs = result.exitedAt - (result.settledAt as number)
      console.info(`process-lifetime ${run}: exited ${lingerMs} ms after the request settled`)
      expect(lingerMs).toBeLessThan(exitBudgetMs)
    },
    20_000,
  )
})
