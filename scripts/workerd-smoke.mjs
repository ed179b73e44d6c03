// Cloudflare Workers smoke test on the real workerd runtime. A Worker bundled (esbuild) from
// the BUILT root entry (dist/index.js) relays, with relay() + webSink(), a faulty upstream on
// 127.0.0.1 that answers the first attempt with an empty stream and the second with a normal
// one. Node drives it over HTTP and checks the client got the whole answer from one retry.
// Then the example Worker (examples/worker.ts, bundled the same way) is driven by the official
// OpenAI and Anthropic SDKs, streaming and not, each after a fault before the first output.
// workerd is the npm package at the version pinned in scripts/runtime-bin.mjs, installed on first
// use into .runtimes/workerd/ (not a devDependency, so `npm ci` does not fetch it).
// Run after `npm run build`: node scripts/workerd-smoke.mjs

import { execFileSync, spawn } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Anthropic from '@anthropic-ai/sdk'
import { build } from 'esbuild'
import OpenAI from 'openai'
import { classifyEof, createFrameReader, createStreamTracker, openaiChat } from '../dist/index.js'
import { createFaultyUpstream } from '../dist/testing.js'
import { runtimeBin } from './runtime-bin.mjs'

const root = fileURLToPath(new URL('..', import.meta.url))
const workerd = runtimeBin('workerd')
const answer = 'The quick brown fox jumps over the lazy dog.'
const budgetMs = 60_000

const workerSource = `
import { createMemoryKeyPool, openaiChat, relay, webSink } from 'stream-boundary'

export default {
  async fetch(request, env, ctx) {
    // The test's readiness probe.
    if (request.method !== 'POST') return new Response(null, { status: 204 })
    const body = await request.text()
    const pool = createMemoryKeyPool([
      { id: 'key-a', secret: 'sk-worker-a' },
      { id: 'key-b', secret: 'sk-worker-b' },
    ])
    const { sink, response } = webSink()
    const outcome = relay({
      sink,
      pool,
      adapter: openaiChat,
      signal: request.signal,
      policy: {
        maxAttempts: 2,
        backoff: { baseMs: 1 },
        peek: { firstOutputTimeoutMs: 10_000 },
        // Proves to the test which runtime served the response.
        headers: { 'x-served-by': navigator.userAgent },
      },
      attempt: ({ key, signal }) =>
        fetch(env.UPSTREAM_URL + '/v1/chat/completions', {
          method: 'POST',
          body,
          signal,
          headers: {
            'content-type': 'application/json',
            authorization: 'Bearer ' + key.secret,
            'x-fault-scenario': 'flaky',
          },
        }),
    })
    ctx.waitUntil(outcome)
    return response
  },
}
`

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

function config(port, examplePort, upstreamUrl) {
  return `using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    (name = "example", worker = .example),
    # workerd blocks private and loopback addresses by default (SSRF); the upstream is local.
    (name = "loopback", network = (allow = ["local"])),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:${port}", http = (), service = "main"),
    (name = "example", address = "127.0.0.1:${examplePort}", http = (), service = "example"),
  ],
);

const worker :Workerd.Worker = (
  modules = [(name = "worker.js", esModule = embed "worker.js")],
  compatibilityDate = "2025-09-01",
  globalOutbound = "loopback",
  bindings = [(name = "UPSTREAM_URL", text = "${upstreamUrl}")],
);

const example :Workerd.Worker = (
  modules = [(name = "example.js", esModule = embed "example.js")],
  compatibilityDate = "2025-09-01",
  globalOutbound = "loopback",
  bindings = [
    (name = "UPSTREAM_OPENAI_URL", text = "${upstreamUrl}/v1"),
    (name = "UPSTREAM_ANTHROPIC_URL", text = "${upstreamUrl}"),
    (name = "GATEWAY_KEYS", text = "key-a:sk-worker-a,key-b:sk-worker-b"),
  ],
);
`
}

/** The example Worker behind the official SDKs: each request after one fault before output. */
async function exampleChecks(base) {
  const options = (scenario) => ({
    maxRetries: 0,
    defaultHeaders: { 'x-fault-scenario': scenario },
  })
  const messages = [{ role: 'user', content: 'Say the pangram.' }]
  const checks = {
    'OpenAI Chat, streaming (empty then ok)': async () => {
      const openai = new OpenAI({ apiKey: 'sk-client', baseURL: `${base}/v1`, ...options('empty') })
      let text = ''
      for await (const chunk of await openai.chat.completions.create({
        model: 'm',
        messages,
        stream: true,
      }))
        text += chunk.choices[0]?.delta?.content ?? ''
      return text
    },
    'OpenAI Chat, non-streaming (html-500 then ok)': async () => {
      const openai = new OpenAI({ apiKey: 'sk-client', baseURL: `${base}/v1`, ...options('html') })
      const completion = await openai.chat.completions.create({ model: 'm', messages })
      return completion.choices[0]?.message.content
    },
    'Anthropic Messages, streaming (overloaded then ok)': async () => {
      const anthropic = new Anthropic({
        apiKey: 'sk-client',
        baseURL: base,
        ...options('overloaded'),
      })
      const message = await anthropic.messages
        .stream({ model: 'c', max_tokens: 64, messages })
        .finalMessage()
      return message.content.map((block) => (block.type === 'text' ? block.text : '')).join('')
    },
    'Anthropic Messages, non-streaming (html-500 then ok)': async () => {
      const anthropic = new Anthropic({
        apiKey: 'sk-client',
        baseURL: base,
        ...options('html-again'),
      })
      const message = await anthropic.messages.create({ model: 'c', max_tokens: 64, messages })
      return message.content.map((block) => (block.type === 'text' ? block.text : '')).join('')
    },
  }
  for (const [name, check] of Object.entries(checks)) {
    upstream.reset()
    const text = await check()
    if (text !== answer) throw new Error(`example worker, ${name}: got ${JSON.stringify(text)}`)
    if (upstream.requests.length !== 2)
      throw new Error(
        `example worker, ${name}: ${upstream.requests.length} upstream requests, not 2`,
      )
    console.log(
      `ok   ${version}: examples/worker.ts, ${name}: the whole answer after 1 pre-output retry`,
    )
  }
  return Object.keys(checks).length
}

async function waitUntilListening(url, child, deadline) {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`workerd exited with code ${child.exitCode}`)
    try {
      const res = await fetch(url, { method: 'OPTIONS', signal: AbortSignal.timeout(1000) })
      await res.body?.cancel()
      return
    } catch {
      if (Date.now() > deadline) throw new Error('workerd did not start listening in time')
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
}

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000)
  await exited
  clearTimeout(timer)
}

const deadline = Date.now() + budgetMs
const version = execFileSync(workerd, ['--version'], { encoding: 'utf8' }).trim()
const dir = await mkdtemp(join(tmpdir(), 'stream-boundary-workerd-'))
const upstream = createFaultyUpstream({
  scenarios: {
    flaky: ['empty', 'ok'],
    empty: ['empty', 'ok'],
    overloaded: ['overloaded', 'ok'],
    html: ['html-500', 'ok'],
    'html-again': ['html-500', 'ok'],
  },
})
let child
let failure
let passed = 0
let log = ''
try {
  await writeFile(join(dir, 'entry.mjs'), workerSource)
  await build({
    entryPoints: [join(dir, 'entry.mjs')],
    outfile: join(dir, 'worker.js'),
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    alias: { 'stream-boundary': join(root, 'dist/index.js') },
    // dist/index.js imports its runtime dependencies by name; they resolve from the repo.
    nodePaths: [join(root, 'node_modules')],
    mainFields: ['module', 'main'],
    logLevel: 'warning',
  })
  await build({
    entryPoints: [join(root, 'examples/worker.ts')],
    outfile: join(dir, 'example.js'),
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    alias: {
      'stream-boundary/advanced': join(root, 'dist/advanced.js'),
      'stream-boundary': join(root, 'dist/index.js'),
    },
    nodePaths: [join(root, 'node_modules')],
    mainFields: ['module', 'main'],
    logLevel: 'warning',
  })
  const upstreamUrl = await upstream.listen()
  const port = await freePort()
  const examplePort = await freePort()
  await writeFile(join(dir, 'config.capnp'), config(port, examplePort, upstreamUrl))
  child = spawn(workerd, ['serve', join(dir, 'config.capnp')], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  child.stdout.on('data', (chunk) => {
    log += chunk
  })
  child.stderr.on('data', (chunk) => {
    log += chunk
  })
  const url = `http://127.0.0.1:${port}/v1/chat/completions`
  await waitUntilListening(url, child, deadline)

  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    signal: AbortSignal.timeout(Math.max(1000, deadline - Date.now())),
  })
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`)
  const tracker = createStreamTracker(openaiChat, { keepTextChars: 10_000 })
  const reader = createFrameReader(res.body)
  for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
    tracker.observe(frame)
  }
  const text = tracker.state.visibleText
  const eof = classifyEof(tracker.state).kind
  if (text !== answer || eof !== 'completed') {
    throw new Error(`body: expected the full answer, got ${JSON.stringify(text)} (${eof})`)
  }
  const seen = upstream.requests.map((r) => r.fault)
  if (upstream.requests.length !== 2) {
    throw new Error(`upstream: expected 2 requests, got ${JSON.stringify(seen)}`)
  }
  const ran = res.headers.get('x-served-by')
  if (ran !== 'Cloudflare-Workers') throw new Error(`served by ${ran}, not workerd`)
  console.log(
    `ok   ${version}: relay + webSink over 127.0.0.1, ${seen.join(' → ')}: the client got the full answer after 1 pre-output retry`,
  )
  passed = 1 + (await exampleChecks(`http://127.0.0.1:${examplePort}`))
} catch (error) {
  failure = error
  console.log(`FAIL workerd smoke: ${error?.stack ?? error}`)
  if (log !== '') console.log(`workerd output:\n${log}`)
} finally {
  if (child !== undefined) await stop(child)
  await upstream.close()
  await rm(dir, { recursive: true, force: true })
}
console.log(`${passed} passed, ${failure === undefined ? 0 : 1} failed`)
process.exit(failure === undefined ? 0 : 1)
