// The core suite every runtime runs against the BUILT package (dist/), with no test framework:
// plain ESM and Web standards, so Node, Bun and Deno run the same file unchanged.
// Prints one line per test and ends with "N passed, M failed"; exits non-zero on a failure.
// Run it after `npm run build`: node|bun|deno run -A test/runtimes/core-suite.mjs

import {
  anthropicMessages,
  classifyEof,
  createCommitGate,
  createFrameReader,
  createMemoryKeyPool,
  createResilientFetch,
  createStreamTracker,
  geminiGenerateContent,
  isFrameTooLargeError,
  isRetryAfterCommitError,
  openaiChat,
  openaiResponses,
  peekFirstOutput,
  relay,
  webSink,
} from '../../dist/index.js'
import { arbitraries, checkAdapter, createFaultyUpstream } from '../../dist/testing.js'

const runtime = globalThis.Deno
  ? `deno ${globalThis.Deno.version.deno}`
  : globalThis.Bun
    ? `bun ${globalThis.Bun.version}`
    : `node ${globalThis.process.version}`

const encoder = new TextEncoder()
const decoder = new TextDecoder()
const bytes = (text) => encoder.encode(text)

function assert(condition, message) {
  if (!condition) throw new Error(message)
}
function equal(actual, expected, what) {
  const a = JSON.stringify(actual)
  const e = JSON.stringify(expected)
  if (a !== e) throw new Error(`${what}: expected ${e}, got ${a}`)
}
function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.length
  }
  return out
}
function split(input, size) {
  const chunks = []
  for (let at = 0; at < input.length; at += size) chunks.push(input.slice(at, at + size))
  return chunks
}
/** Seeded split points, so a failure replays. */
function randomSplit(input, seed) {
  let state = seed
  const chunks = []
  let at = 0
  while (at < input.length) {
    state = (state * 1103515245 + 12345) % 2 ** 31
    const size = 1 + (state % 17)
    chunks.push(input.slice(at, at + size))
    at += size
  }
  return chunks
}
function streamOf(chunks) {
  let index = 0
  return new ReadableStream({
    pull(controller) {
      const chunk = chunks[index++]
      if (chunk === undefined) controller.close()
      else controller.enqueue(chunk)
    },
  })
}
async function readAll(reader) {
  const frames = []
  for (let frame = await reader.next(); frame !== null; frame = await reader.next())
    frames.push(frame)
  return frames
}

// --- streams of each protocol -----------------------------------------------------------

const chat = {
  role: 'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
  text: (t) =>
    `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}},"finish_reason":null}]}\n\n`,
  stop: 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
  done: 'data: [DONE]\n\n',
  error: 'data: {"error":{"message":"Overloaded","type":"server_error","code":null}}\n\n',
}

const adapterStreams = [
  {
    adapter: openaiChat,
    body: `: keep-alive\n\n${chat.role}${chat.text('Hel')}${chat.text('lo')}${chat.stop}${chat.done}`,
    kinds: ['keepalive', 'meta', 'text', 'text', 'terminal', 'terminal'],
    eof: 'completed',
  },
  {
    adapter: openaiChat,
    body: `${chat.role}${chat.text('Hel')}`,
    kinds: ['meta', 'text'],
    eof: 'partial',
  },
  {
    adapter: openaiChat,
    body: `${chat.role}: ping\n\n`,
    kinds: ['meta', 'keepalive'],
    eof: 'empty',
  },
  { adapter: openaiChat, body: chat.error, kinds: ['error'], eof: 'error-only' },
  {
    adapter: openaiChat,
    body: 'data: {"choices":[{"index":0,"delta":{"reasoning_content":"Hmm."},"finish_reason":null}]}\n\n',
    kinds: ['reasoning'],
    eof: 'thinking-only',
  },
  {
    adapter: openaiResponses,
    body:
      'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[]}}\n\n' +
      'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}\n\n' +
      'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_1","status":"completed","output":[]}}\n\n',
    kinds: ['meta', 'text', 'terminal'],
    eof: 'completed',
  },
  {
    adapter: anthropicMessages,
    body:
      'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}}\n\n' +
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n' +
      'event: ping\ndata: {"type": "ping"}\n\n' +
      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n' +
      'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n' +
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}\n\n' +
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    kinds: ['meta', 'meta', 'keepalive', 'text', 'meta', 'terminal', 'terminal'],
    eof: 'completed',
  },
  {
    adapter: geminiGenerateContent,
    body:
      'data: {"candidates":[{"content":{"parts":[{"text":"The"}],"role":"model"},"index":0}]}\r\n\r\n' +
      'data: {"candidates":[{"content":{"parts":[{"text":" end."}],"role":"model"},"finishReason":"STOP","index":0}]}\r\n\r\n',
    kinds: ['text', 'text'],
    eof: 'completed',
  },
]

// --- tests ------------------------------------------------------------------------------

const tests = []
const test = (name, fn) => tests.push({ name, fn })

const mixed = bytes(
  `\uFEFFevent: a\ndata: one\r\n\r\n: comment\rdata: two\r\rid: 7\ndata: thr\ndata: ee\n\ndata: café ☕\r\n\r\ndata: tail`,
)

test('frame reader: lossless on whole, 1-byte, 3-byte and random chunkings', async () => {
  const expected = (await readAll(createFrameReader(streamOf([mixed])))).map((f) => f.data)
  equal(expected, ['one', 'two', 'thr\nee', 'café ☕', 'tail'], 'data of a whole-chunk read')
  const chunkings = [[mixed], split(mixed, 1), split(mixed, 3)]
  for (let seed = 1; seed <= 20; seed++) chunkings.push(randomSplit(mixed, seed))
  for (const chunks of chunkings) {
    const frames = await readAll(createFrameReader(streamOf(chunks)))
    equal(decoder.decode(concat(frames.map((f) => f.raw))), decoder.decode(mixed), 'raw bytes')
    equal(concat(frames.map((f) => f.raw)).length, mixed.length, 'byte count')
    equal(
      frames.map((f) => f.data),
      expected,
      `data under ${chunks.length} chunks`,
    )
    equal(frames.at(-1)?.terminated, false, 'the EOF-cut frame is unterminated')
  }
})

test('frame reader: CRLF split across chunks, AsyncIterable source', async () => {
  const input = bytes('data: a\r\n\r\ndata: b\r\n\r\n')
  const cr = input.indexOf(13)
  const chunks = [input.slice(0, cr + 1), input.slice(cr + 1, cr + 3), input.slice(cr + 3)]
  async function* source() {
    yield* chunks
  }
  const frames = await readAll(createFrameReader(source()))
  equal(
    frames.map((f) => [f.data, f.terminated]),
    [
      ['a', true],
      ['b', true],
    ],
    'frames',
  )
  equal(
    frames.map((f) => f.raw.length),
    [11, 11],
    'raw lengths',
  )
})

test('frame reader: BOM kept in raw, removed from fields', async () => {
  const frames = await readAll(createFrameReader(streamOf(split(bytes('\uFEFFdata: x\n\n'), 1))))
  equal(frames.length, 1, 'frames')
  equal([...frames[0].raw.slice(0, 3)], [0xef, 0xbb, 0xbf], 'BOM bytes in raw')
  equal(frames[0].data, 'x', 'data')
})

test('frame reader: invalid UTF-8 is U+FFFD in fields, intact in raw', async () => {
  const input = concat([bytes('data: a'), new Uint8Array([0xff, 0xfe]), bytes('b\n\n')])
  const frames = await readAll(createFrameReader(streamOf(split(input, 2))))
  equal(frames[0].data, 'a\uFFFD\uFFFDb', 'data')
  equal([...frames[0].raw], [...input], 'raw')
})

test('frame reader: abort mid-frame, then resume the same frame', async () => {
  let controller
  const body = new ReadableStream({
    start(c) {
      controller = c
    },
  })
  const reader = createFrameReader(body)
  controller.enqueue(bytes('data: hel'))
  const abort = new AbortController()
  const pending = reader.next({ signal: abort.signal })
  setTimeout(() => abort.abort(new Error('stop peeking')), 10)
  const reason = await pending.then(
    () => 'resolved',
    (error) => error.message,
  )
  equal(reason, 'stop peeking', 'rejects with the signal reason')
  equal(reader.bufferedBytes, 9, 'the half frame stays buffered')
  controller.enqueue(bytes('lo\n\ndata: next\n\n'))
  controller.close()
  const frames = await readAll(reader)
  equal(
    frames.map((f) => f.data),
    ['hello', 'next'],
    'frames after resuming',
  )
})

test('frame reader: a frame over maxFrameBytes is FrameTooLargeError', async () => {
  const reader = createFrameReader(streamOf([bytes(`data: ${'x'.repeat(100)}\n\n`)]), {
    maxFrameBytes: 64,
  })
  const error = await reader.next().then(
    () => undefined,
    (e) => e,
  )
  assert(isFrameTooLargeError(error), `expected FrameTooLargeError, got ${error}`)
  equal(error.code, 'FRAME_TOO_LARGE', 'code')
})

for (const { adapter, body, kinds, eof } of adapterStreams) {
  test(`adapter ${adapter.name}: verdicts and classifyEof (${eof})`, async () => {
    for (const size of [body.length, 5, 1]) {
      const tracker = createStreamTracker(adapter)
      const reader = createFrameReader(streamOf(split(bytes(body), size)))
      const seen = (await readAll(reader)).map((frame) => tracker.observe(frame).kind)
      equal(seen, kinds, `verdicts (chunks of ${size})`)
      equal(classifyEof(tracker.state).kind, eof, 'EOF class')
    }
  })
}

test('peekFirstOutput: output, with the reader handed on intact', async () => {
  const body = `: hi\n\n${chat.role}${chat.text('Hel')}${chat.text('lo')}${chat.stop}`
  const outcome = await peekFirstOutput(
    createFrameReader(streamOf(split(bytes(body), 7))),
    openaiChat,
  )
  equal(outcome.kind, 'output', 'kind')
  equal(outcome.frames.length, 3, 'frames consumed')
  const rest = await readAll(outcome.reader)
  equal(decoder.decode(concat([...outcome.frames, ...rest].map((f) => f.raw))), body, 'bytes')
})

test('peekFirstOutput: empty', async () => {
  const outcome = await peekFirstOutput(
    createFrameReader(streamOf([bytes(`${chat.role}: ka\n\n`)])),
    openaiChat,
  )
  equal([outcome.kind, outcome.eof?.kind], ['empty', 'empty'], 'kind')
})

test('peekFirstOutput: first-output-timeout on a real 50 ms timer', async () => {
  let cancelled = false
  const body = new ReadableStream({
    start(controller) {
      controller.enqueue(bytes(`${chat.role}data: {"choices":[{"ind`))
    },
    cancel() {
      cancelled = true
    },
  })
  const started = performance.now()
  const outcome = await peekFirstOutput(createFrameReader(body), openaiChat, {
    firstOutputTimeoutMs: 50,
  })
  const elapsed = performance.now() - started
  equal(outcome.kind, 'first-output-timeout', 'kind')
  equal(outcome.error.code, 'FIRST_OUTPUT_TIMEOUT', 'error code')
  assert(outcome.partialFrameBytes > 0, 'the half frame is left in the reader')
  assert(elapsed >= 45 && elapsed < 2000, `fired after ${elapsed} ms`)
  await outcome.reader.cancel()
  assert(cancelled, 'the upstream body was cancelled')
})

test('commit gate + webSink: a real Response, then no retry after content', async () => {
  const { sink, response } = webSink()
  const gate = createCommitGate(sink, { headers: { 'x-gateway': 'yes' } })
  equal(gate.canRetry, true, 'canRetry before')
  const writing = (async () => {
    await gate.write(bytes(chat.text('Hi')))
    await gate.write(bytes(chat.done))
    await gate.close()
  })()
  const res = await response
  equal(res.status, 200, 'status')
  equal(res.headers.get('content-type'), 'text/event-stream; charset=utf-8', 'content-type')
  equal(res.headers.get('x-gateway'), 'yes', 'host header')
  equal(await res.text(), `${chat.text('Hi')}${chat.done}`, 'body')
  await writing
  equal(gate.state, 'closed', 'state')
  const second = webSink()
  const open = createCommitGate(second.sink)
  await open.write(bytes(chat.text('x')))
  equal([open.state, open.canRetry], ['content-committed', false], 'after content')
  try {
    open.assertCanRetry()
    throw new Error('assertCanRetry did not throw after content')
  } catch (error) {
    assert(isRetryAfterCommitError(error), `expected RetryAfterCommitError, got ${error}`)
  }
  open.abort(new Error('test over'))
})

test('commit gate + webSink: respond() before commit is a real status', async () => {
  const { sink, response } = webSink()
  const gate = createCommitGate(sink)
  void gate.respond(503, '{"error":"busy"}')
  const res = await response
  equal([res.status, await res.text()], [503, '{"error":"busy"}'], 'status and body')
})

const answer = 'The quick brown fox jumps over the lazy dog.'
const keys = () =>
  createMemoryKeyPool([
    { id: 'key-a', secret: 'sk-test-a' },
    { id: 'key-b', secret: 'sk-test-b' },
  ])
const chatUrl = 'http://upstream.test/v1/chat/completions'
const chatBody = JSON.stringify({ model: 'm', stream: true, messages: [] })

async function visibleText(res, adapter = openaiChat) {
  const tracker = createStreamTracker(adapter, { keepTextChars: 10_000 })
  for (const frame of await readAll(createFrameReader(res.body))) tracker.observe(frame)
  return { text: tracker.state.visibleText, eof: classifyEof(tracker.state).kind }
}

function relayThrough(upstream, scenario, sink, policy = {}) {
  return relay({
    sink,
    pool: keys(),
    adapter: openaiChat,
    policy: { backoff: { baseMs: 1 }, ...policy },
    attempt: ({ key, signal }) =>
      upstream.fetch(chatUrl, {
        method: 'POST',
        body: chatBody,
        signal,
        headers: { authorization: `Bearer ${key.secret}`, 'x-fault-scenario': scenario },
      }),
  })
}

test("relay + memory pool: ['empty','ok'] commits the second attempt", async () => {
  const upstream = createFaultyUpstream({ scenarios: { flaky: ['empty', 'ok'] } })
  const { sink, response } = webSink()
  const outcome = relayThrough(upstream, 'flaky', sink)
  const res = await response
  const body = await visibleText(res)
  const done = await outcome
  equal(res.status, 200, 'status')
  equal(body, { text: answer, eof: 'completed' }, 'body')
  equal(done.kind, 'committed', 'outcome')
  equal(
    done.attempts.map((a) => [a.keyId, a.result]),
    [
      ['key-a', 'empty'],
      ['key-b', 'committed'],
    ],
    'attempts',
  )
  equal(upstream.requests.length, 2, 'upstream requests')
  await upstream.close()
})

test('relay + memory pool: every attempt failing is a 502 with a JSON body', async () => {
  const upstream = createFaultyUpstream({ scenarios: { dead: ['empty'] } })
  const { sink, response } = webSink()
  const outcome = relayThrough(upstream, 'dead', sink, { maxAttempts: 2 })
  const res = await response
  const json = await res.json()
  const done = await outcome
  equal(res.status, 502, 'status')
  assert(res.headers.get('content-type')?.includes('application/json'), 'content-type is JSON')
  assert(typeof json.error?.message === 'string', `an error object: ${JSON.stringify(json)}`)
  equal([done.kind, done.status, done.reason], ['failed', 502, 'empty'], 'outcome')
  equal(upstream.requests.length, 2, 'upstream requests')
  await upstream.close()
})

test('createResilientFetch over the faulty upstream fetch', async () => {
  const upstream = createFaultyUpstream({ scenarios: { flaky: ['error-frame', 'ok'] } })
  const outcomes = []
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    pool: keys(),
    policy: { backoff: { baseMs: 1 } },
    onOutcome: (outcome) => outcomes.push(outcome),
  })
  const res = await fetch(chatUrl, {
    method: 'POST',
    body: chatBody,
    headers: { 'content-type': 'application/json', 'x-fault-scenario': 'flaky' },
  })
  equal(res.status, 200, 'status')
  equal(await visibleText(res), { text: answer, eof: 'completed' }, 'body')
  equal(upstream.requests.length, 2, 'upstream requests')
  equal(upstream.requests[1].headers.authorization, '[redacted]', 'credential set, then redacted')
  // The outcome is reported once the pump has closed the response, just after its last byte.
  for (let i = 0; i < 100 && outcomes.length === 0; i++) await new Promise((r) => setTimeout(r, 5))
  equal(outcomes[0]?.kind, 'committed', 'outcome')
  await upstream.close()
})

test('continueAfterCut: an Anthropic answer cut after output is continued whole', async () => {
  const upstream = createFaultyUpstream({ scenarios: { cut: ['partial-then-cut', 'ok'] } })
  const fetch = createResilientFetch({
    fetch: upstream.fetch,
    pool: keys(),
    policy: { backoff: { baseMs: 1 }, continueAfterCut: true },
  })
  const res = await fetch('https://upstream.test/v1/messages', {
    method: 'POST',
    body: JSON.stringify({
      model: 'c',
      max_tokens: 64,
      stream: true,
      messages: [{ role: 'user', content: 'hi' }],
    }),
    headers: { 'content-type': 'application/json', 'x-fault-scenario': 'cut' },
  })
  equal(res.status, 200, 'status')
  equal(await visibleText(res, anthropicMessages), { text: answer, eof: 'completed' }, 'body')
  equal(upstream.requests.length, 2, 'upstream requests (the cut one, its continuation)')
  await upstream.close()
})

test('checkAdapter(openaiChat, protocolStream, numRuns 30)', async () => {
  await checkAdapter(openaiChat, { streams: arbitraries.protocolStream(openaiChat), numRuns: 30 })
})

test('stream-boundary/node: relay into nodeSink on node:http, faulty upstream via serveFetch', async () => {
  const { createServer } = await import('node:http')
  const { nodeSink, serveFetch } = await import('../../dist/node.js')
  const upstream = createFaultyUpstream({ scenarios: { flaky: ['empty', 'ok'] } })
  const served = await serveFetch((request) => upstream.handle(request))
  const server = createServer((_req, res) => {
    void relay({
      sink: nodeSink(res),
      pool: keys(),
      adapter: openaiChat,
      policy: { backoff: { baseMs: 1 } },
      attempt: ({ signal }) =>
        fetch(`${served.url}/v1/chat/completions`, {
          method: 'POST',
          body: chatBody,
          signal,
          headers: { 'x-fault-scenario': 'flaky' },
        }),
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  try {
    const res = await fetch(`http://127.0.0.1:${server.address().port}/`)
    equal(res.status, 200, 'status')
    equal(res.headers.get('content-type'), 'text/event-stream; charset=utf-8', 'content-type')
    equal(await visibleText(res), { text: answer, eof: 'completed' }, 'body')
    equal(upstream.requests.length, 2, 'upstream requests over HTTP')
  } finally {
    await new Promise((resolve) => {
      server.close(resolve)
      server.closeAllConnections?.()
    })
    await served.close()
    await upstream.close()
  }
})

test('stream-boundary/testing: createFaultyUpstream().listen() serves over HTTP', async () => {
  // listen() imports 'stream-boundary/node' by the package's own name (a self-reference).
  const upstream = createFaultyUpstream({ scenarios: { flaky: ['empty', 'ok'] } })
  const url = await upstream.listen()
  try {
    const post = () =>
      fetch(`${url}/v1/messages`, {
        method: 'POST',
        body: chatBody,
        headers: { 'x-fault-scenario': 'flaky', 'x-api-key': 'sk-secret' },
      })
    equal(await visibleText(await post(), anthropicMessages), { text: '', eof: 'empty' }, '1st')
    equal(
      await visibleText(await post(), anthropicMessages),
      { text: answer, eof: 'completed' },
      '2nd',
    )
    equal(upstream.requests[0]?.headers['x-api-key'], '[redacted]', 'credential redacted')
  } finally {
    await upstream.close()
  }
})

// --- runner -----------------------------------------------------------------------------

const timeoutMs = 20_000
let passed = 0
let failed = 0
console.log(`# stream-boundary core suite on ${runtime}`)
for (const { name, fn } of tests) {
  const started = performance.now()
  let timer
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs)
      }),
    ])
    passed++
    console.log(`ok   ${name} (${Math.round(performance.now() - started)} ms)`)
  } catch (error) {
    failed++
    console.log(`FAIL ${name}\n     ${String(error?.stack ?? error).replaceAll('\n', '\n     ')}`)
  } finally {
    clearTimeout(timer)
  }
}
console.log(`${passed} passed, ${failed} failed`)
const code = failed > 0 ? 1 : 0
if (globalThis.Deno) globalThis.Deno.exit(code)
else globalThis.process.exit(code)
