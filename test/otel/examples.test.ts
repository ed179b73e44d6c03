import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { createServer } from 'node:net'
import { promisify } from 'node:util'
import { afterEach, describe, expect, it } from 'vitest'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

/**
 * The OpenTelemetry examples run as a user runs them: the console one prints a request span, a
 * retried request's second attempt and the GenAI metrics; the example gateway with
 * `PROMETHEUS_PORT` serves its metrics for a scrape.
 */

const run = promisify(execFile)
const root = new URL('../../', import.meta.url)

const children: ChildProcess[] = []
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL')
})

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

describe('OpenTelemetry examples', () => {
  it('examples/otel-console.ts prints the spans and the GenAI metrics', async () => {
    const { stdout } = await run('node', ['--import', 'tsx', 'examples/otel-console.ts'], {
      cwd: root,
      timeout: 30_000,
    })
    expect(stdout).toContain("name: 'chat gpt-4o-mini'")
    expect(stdout).toContain("name: 'chat gpt-4o-mini attempt 2'")
    expect(stdout).toContain("'stream_boundary.attempt.result': 'empty'")
    expect(stdout).toContain('gen_ai.client.token.usage')
    expect(stdout).toContain('gen_ai.client.operation.duration')
  })

  it('the example gateway with PROMETHEUS_PORT serves its metrics to a scrape', async () => {
    const upstream = createFaultyUpstream()
    const upstreamUrl = await upstream.listen()
    const [port, metricsPort] = [await freePort(), await freePort()]
    const child = spawn('node', ['--import', 'tsx', 'examples/node-http-gateway.ts'], {
      cwd: root,
      env: {
        ...process.env,
        UPSTREAM_OPENAI_URL: `${upstreamUrl}/v1`,
        GATEWAY_KEYS: 'a:sk-prom-a-0123456789',
        PORT: String(port),
        PROMETHEUS_PORT: String(metricsPort),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    children.push(child)
    let out = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString()
    })
    await expect.poll(() => out, { timeout: 20_000 }).toContain('listening on')
    const response = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    })
    expect(response.status).toBe(200)
    await response.text()
    const scrape = async () => (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
    await expect.poll(scrape, { timeout: 5_000 }).toMatch(/gen_ai_client_operation_duration/)
    const text = await scrape()
    expect(text).toMatch(/gen_ai_client_token_usage/)
    expect(text).toMatch(/gen_ai_request_model="gpt-test"/)
    expect(text).not.toContain('sk-prom-a-0123456789')
    await upstream.close()
  })
})
