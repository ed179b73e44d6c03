/**
 * What a user copies works: the README's runnable snippets (`<!-- snippet: run NAME -->`),
 * extracted as written, each started in its own Node process against the embedded faulty
 * upstream and driven by the official `openai` and `@anthropic-ai/sdk` clients, streaming and
 * not. A snippet that breaks a guarantee fails here: a duplicated or cut answer, a process
 * that dies on a bad body, a corrupted prompt, an invalid request sent upstream, a finished
 * answer logged as failed. The variants turn on what a newcomer would (continuation, hedging,
 * OpenTelemetry) by the edits named in each test, which fail loudly when the README changes.
 */

import { type ChildProcess, spawn } from 'node:child_process'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { createServer as createNetServer } from 'node:net'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { chaosMarker, createFaultyUpstream } from 'stream-boundary/testing'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { root, runSnippet } from './marked-snippets.js'

const answer = 'The quick brown fox jumps over the lazy dog.'
const upstream = createFaultyUpstream({
  scenarios: {
    'empty-then-ok': ['empty', 'ok'],
    'cut-then-ok': ['partial-then-cut', 'ok'],
    'stall-then-ok': ['role-only-then-stall', 'ok'],
  },
})
let upstreamUrl = ''
const runDir = `${root}test/readme/.run/`

beforeAll(async () => {
  upstreamUrl = await upstream.listen()
  mkdirSync(runDir, { recursive: true })
})
afterAll(() => upstream.close())

const running: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const stop of running.splice(0)) await stop()
  upstream.reset()
})

/** A free port on 127.0.0.1 (closed again before the snippet listens on it). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createNetServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0))
    })
  })
}

interface Running {
  readonly url: string
  /** The snippet's stdout lines so far. */
  readonly lines: string[]
  /** Resolves once stdout has `count` lines. */
  linesAtLeast(count: number): Promise<string[]>
  readonly child: ChildProcess
}

/** Writes `code` as a module in test/readme/.run/ and starts it with Node (through tsx). */
async function start(
  name: string,
  code: string,
  env: Record<string, string>,
  preload: readonly string[] = [],
): Promise<Running> {
  const file = `${runDir}${name}.ts`
  writeFileSync(file, code)
  const port = await freePort()
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', ...preload.flatMap((path) => ['--import', path]), file],
    {
      cwd: root,
      env: { ...process.env, ...env, PORT: String(port) },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  )
  const lines: string[] = []
  let stderr = ''
  let partial = ''
  const waiters = new Set<() => void>()
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = `${partial}${chunk}`.split('\n')
    partial = parts.pop() ?? ''
    lines.push(...parts)
    for (const wake of waiters) wake()
  })
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk
  })
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve))
  running.push(async () => {
    child.kill()
    await exited
  })
  const url = `http://127.0.0.1:${port}`
  // Ready when it accepts a connection; a snippet that exits first fails with its stderr.
  const deadline = Date.now() + 20_000
  for (;;) {
    const ready = await new Promise<boolean>((resolve) => {
      const probe = httpRequest(`${url}/`, { method: 'GET' }, (res) => {
        res.resume()
        resolve(true)
      })
      probe.once('error', () => resolve(false))
      probe.end()
    })
    if (ready) break
    if (child.exitCode !== null) throw new Error(`${name} exited ${child.exitCode}: ${stderr}`)
    if (Date.now() > deadline) throw new Error(`${name} did not listen within 20 s: ${stderr}`)
    await new Promise((resume) => setTimeout(resume, 50))
  }
  return {
    url,
    lines,
    child,
    linesAtLeast: (count) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`${name}: ${lines.length} of ${count} lines; stderr: ${stderr}`)),
          10_000,
        )
        const check = () => {
          if (lines.length < count) return
          clearTimeout(timer)
          waiters.delete(check)
          resolve(lines.slice(0, count))
        }
        waiters.add(check)
        check()
      }),
  }
}

/** Applies a named edit to a snippet; fails when the snippet no longer has the text. */
function edit(code: string, from: string, to: string): string {
  if (!code.includes(from)) throw new Error(`the snippet no longer contains: ${from}`)
  return code.replace(from, to)
}

/** A raw POST whose body is written in the given pieces, a few ms apart. */
function post(url: string, pieces: readonly (string | Uint8Array)[]) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = httpRequest(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => {
          body += chunk
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
      },
    )
    req.on('error', reject)
    void (async () => {
      for (const piece of pieces) {
        req.write(piece)
        await new Promise((resume) => setTimeout(resume, 5))
      }
      req.end()
    })()
  })
}

const prompt = (marker?: { scenario: string; requestId: string }) =>
  `Say hi${marker === undefined ? '' : ` ${chaosMarker(marker)}`}`

/** The streamed text of one Chat request through the official SDK. */
async function chatStream(openai: OpenAI, content: string): Promise<string> {
  const stream = await openai.chat.completions.create({
    model: 'gpt-test',
    messages: [{ role: 'user', content }],
    stream: true,
  })
  let text = ''
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
  return text
}

describe('README use 1: the node:http gateway', () => {
  const snippet = runSnippet('node-gateway')
  const env = () => ({
    UPSTREAM_URL: `${upstreamUrl}/v1`,
    OPENAI_KEY_A: 'sk-readme-key-a',
    OPENAI_KEY_B: 'sk-readme-key-b',
  })

  it('answers the OpenAI SDK streaming and not, retries before output, and logs each whole answer as ok', async () => {
    const gateway = await start('use-1', snippet.code, env())
    const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'client', maxRetries: 0 })
    expect(await chatStream(openai, prompt())).toBe(answer)
    const whole = await openai.chat.completions.create({
      model: 'gpt-test',
      messages: [{ role: 'user', content: prompt() }],
    })
    expect(whole.choices[0]?.message.content).toBe(answer)
    const retried = await chatStream(openai, prompt({ scenario: 'empty-then-ok', requestId: 'r1' }))
    expect(retried).toBe(`[attempt 2] ${answer}`)
    expect(await gateway.linesAtLeast(3)).toEqual([
      'true committed 1',
      'true committed 1',
      'true committed 2',
    ])
    // A cut after output: the SDK gets an error, never a silent partial answer; not ok.
    await expect(
      chatStream(openai, prompt({ scenario: 'cut-then-ok', requestId: 'r2' })),
    ).rejects.toThrow()
    expect((await gateway.linesAtLeast(4))[3]).toBe('false committed 1')
  })

  it('answers bad bodies 400 in the OpenAI shape, sends them nowhere, and keeps serving', async () => {
    const gateway = await start('use-1-bad-bodies', snippet.code, env())
    const route = `${gateway.url}/v1/chat/completions`
    const bad = [
      ['not json', /not valid JSON/],
      ['{"model":"m","stream":"yes","messages":[]}', /`stream` must be a boolean/],
      ['{"model":{"id":"m"},"messages":[]}', /`model` must be a non-empty string/],
    ] as const
    for (const [body, message] of bad) {
      const answered = await post(route, [body])
      expect(answered.status, body).toBe(400)
      expect((JSON.parse(answered.body) as { error: { message: string } }).error.message).toMatch(
        message,
      )
    }
    expect(upstream.requests).toHaveLength(0)
    // The process is alive and serving.
    const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'client', maxRetries: 0 })
    expect(await chatStream(openai, prompt())).toBe(answer)
    expect(gateway.child.exitCode).toBeNull()
  })

  it('sends a non-ASCII prompt split across chunks to the upstream intact', async () => {
    const gateway = await start('use-1-utf8', snippet.code, env())
    const content = 'Grüße ✓ 🦊 日本語'
    const bytes = new TextEncoder().encode(
      JSON.stringify({ model: 'gpt-test', stream: true, messages: [{ role: 'user', content }] }),
    )
    const fox = bytes.indexOf(0xf0)
    const answered = await post(`${gateway.url}/v1/chat/completions`, [
      bytes.slice(0, fox + 1),
      bytes.slice(fox + 1, fox + 3),
      bytes.slice(fox + 3),
    ])
    expect(answered.status).toBe(200)
    const sent = JSON.parse(upstream.requests[0]?.body ?? '{}') as {
      messages: { content: string }[]
    }
    expect(sent.messages[0]?.content).toBe(content)
  })

  it('with continuation, hedging and OpenTelemetry turned on: whole answers, ok outcomes, spans not in error', async () => {
    let code = edit(
      snippet.code,
      "import { createMemoryKeyPool, openaiChat, relay } from 'stream-boundary'",
      "import { createHedging, createMemoryKeyPool, openaiChat, relay } from 'stream-boundary'\nimport { createRelayTelemetry } from 'stream-boundary/otel'",
    )
    code = edit(
      code,
      'const pool = createMemoryKeyPool(keys)',
      'const pool = createMemoryKeyPool(keys)\nconst hedging = createHedging({ afterMs: 300 })\nconst telemetry = createRelayTelemetry()',
    )
    code = edit(
      code,
      'policy: { peek: { firstOutputTimeoutMs: 20_000 } },',
      'policy: { peek: { firstOutputTimeoutMs: 20_000 }, continueAfterCut: true, hedge: hedging },\n    hooks: telemetry.hooks,',
    )
    const spans = `${runDir}use-1-otel-spans.jsonl`
    rmSync(spans, { force: true })
    const gateway = await start('use-1-otel', code, { ...env(), SPANS_FILE: spans }, [
      `${root}test/readme/otel-spans.ts`,
    ])
    const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'client', maxRetries: 0 })
    expect(await chatStream(openai, prompt())).toBe(answer)
    const whole = await openai.chat.completions.create({
      model: 'gpt-test',
      messages: [{ role: 'user', content: prompt() }],
    })
    expect(whole.choices[0]?.message.content).toBe(answer)
    // A key stuck after its preamble: the hedge answers.
    const hedged = await chatStream(openai, prompt({ scenario: 'stall-then-ok', requestId: 'h1' }))
    expect(hedged).toBe(`[attempt 2] ${answer}`)
    const lines = await gateway.linesAtLeast(3)
    expect(lines.map((line) => line.split(' ').slice(0, 2).join(' '))).toEqual([
      'true committed',
      'true committed',
      'true committed',
    ])
    const requestSpans = readFileSync(spans, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { status: number; attributes: Record<string, unknown> })
      .filter((span) => span.attributes['stream_boundary.outcome'] !== undefined)
    expect(requestSpans).toHaveLength(3)
    for (const span of requestSpans) {
      expect(span.status).not.toBe(2) // SpanStatusCode.ERROR
      expect(span.attributes['stream_boundary.outcome']).toBe('committed')
      expect(span.attributes['stream_boundary.end']).toBe('completed')
    }
    const all = readFileSync(spans, 'utf8')
    expect(all).not.toContain('sk-readme-key')
  })
})

describe('README use 2: an app on the official SDKs', () => {
  it('both SDKs get the answer through createResilientFetch', async () => {
    const snippet = runSnippet('sdk-app')
    // The app is not a server: run it to its end.
    const file = `${runDir}use-2.ts`
    writeFileSync(file, snippet.code)
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      env: {
        ...process.env,
        OPENAI_BASE_URL: `${upstreamUrl}/v1`,
        OPENAI_API_KEY: 'sk-app-openai',
        ANTHROPIC_BASE_URL: upstreamUrl,
        ANTHROPIC_API_KEY: 'sk-app-anthropic',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk
    })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk
    })
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
    expect(stderr).toBe('')
    expect(code).toBe(0)
    expect(stdout).toBe(`${answer}\n${answer}\n`)
  })
})

describe('README Hono snippet: an Anthropic gateway on web standards', () => {
  const snippet = runSnippet('hono-gateway')
  // Served on Node by @hono/node-server, with the Worker's bindings from the environment.
  const serve = (code: string) =>
    `${code}
import { serve } from '@hono/node-server'
serve({
  fetch: (request) =>
    app.fetch(request, { ANTHROPIC_KEY: process.env.ANTHROPIC_KEY, UPSTREAM_URL: process.env.UPSTREAM_URL }),
  port: Number(process.env.PORT),
  hostname: '127.0.0.1',
})
`
  const env = () => ({ UPSTREAM_URL: upstreamUrl, ANTHROPIC_KEY: 'sk-ant-readme' })

  it('answers the Anthropic SDK streaming and not, and a bad body with a 400 in its shape', async () => {
    const gateway = await start('hono', serve(snippet.code), env())
    const anthropic = new Anthropic({ baseURL: gateway.url, apiKey: 'client', maxRetries: 0 })
    const request = {
      model: 'claude-test',
      max_tokens: 100,
      messages: [{ role: 'user' as const, content: prompt() }],
    }
    const streamed = await anthropic.messages.stream(request).finalText()
    expect(streamed).toBe(answer)
    const whole = await anthropic.messages.create(request)
    expect(whole.content[0]?.type === 'text' ? whole.content[0].text : '').toBe(answer)
    const sentBefore = upstream.requests.length
    const bad = await post(`${gateway.url}/v1/messages`, ['{"model":'])
    expect(bad.status).toBe(400)
    expect(upstream.requests).toHaveLength(sentBefore)
    expect(JSON.parse(bad.body)).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error' },
    })
    expect(upstream.requests.every((r) => r.headers['x-api-key'] !== 'client')).toBe(true)
    expect(await gateway.linesAtLeast(2)).toEqual(['true committed 1', 'true committed 1'])
  })

  it('with continueAfterCut a cut answer is continued once: never duplicated', async () => {
    const code = edit(
      snippet.code,
      'attempt: fetchAttempt(',
      'policy: { continueAfterCut: true },\n    attempt: fetchAttempt(',
    )
    const gateway = await start('hono-continuation', serve(code), env())
    const anthropic = new Anthropic({ baseURL: gateway.url, apiKey: 'client', maxRetries: 0 })
    const text = await anthropic.messages
      .stream({
        model: 'claude-test',
        max_tokens: 100,
        messages: [{ role: 'user', content: prompt({ scenario: 'cut-then-ok', requestId: 'c1' }) }],
      })
      .finalText()
    // The continuation's request carried the prefill: the answer is whole, once.
    expect(text.split('The quick brown fox').length - 1).toBe(1)
    expect(text.endsWith(answer.slice(-10))).toBe(true)
    expect(upstream.requests).toHaveLength(2)
    const continued = JSON.parse(upstream.requests[1]?.body ?? '{}') as {
      messages: { role: string }[]
    }
    expect(continued.messages.at(-1)?.role).toBe('assistant')
    expect(await gateway.linesAtLeast(1)).toEqual(['true committed 1'])
  })
})
