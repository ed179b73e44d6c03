import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import OpenAI from 'openai'
import { describe, expect, it, vi } from 'vitest'
import {
  createHedging,
  createMemoryKeyPool,
  openaiChat,
  type RelayOutcome,
  type RelayPolicy,
  relay,
} from '../../src/index.js'
import { clientSignal, nodeSink } from '../../src/node.js'
import { useLoopback } from '../support/loopback.js'

/**
 * Hedging over real HTTP on 127.0.0.1: an upstream that answers per key, a gateway of
 * `relay()` + `nodeSink` over a memory pool, and real clients. No assertion waits on a
 * clock: where an order matters, the upstream holds its answer until the event it depends
 * on happened (with a 2 s fallback, so a broken order fails instead of hanging).
 */

const fastText = 'The quick brown fox jumps over the lazy dog.'
const fallbackMs = 2000

const { listen } = useLoopback()

function chunk(id: string, delta: Record<string, unknown>, finish: string | null = null): string {
  const choice = { index: 0, delta, finish_reason: finish }
  return `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', model: 'm', choices: [choice] })}\n\n`
}

/** A promise opened by hand; `wait()` gives up after `fallbackMs`. */
function latch() {
  let open: () => void = () => {}
  const opened = new Promise<true>((resolve) => {
    open = () => resolve(true)
  })
  return {
    open: () => open(),
    /** Waits for the latch, at most `fallbackMs`; true when it opened. */
    wait: () => {
      let timer: ReturnType<typeof setTimeout> | undefined
      const gaveUp = new Promise<false>((resolve) => {
        timer = setTimeout(() => resolve(false), fallbackMs)
      })
      return Promise.race([opened, gaveUp]).finally(() => clearTimeout(timer))
    },
  }
}

/** One upstream request, as the upstream saw it. */
interface Seen {
  readonly key: string
  /**
   * The first server-side `close` of the response or its socket before the answer finished
   * (not the request's: it closes once its body was read).
   */
  closedAt: number | undefined
  /** When the answer's last byte was handed to the socket. */
  finishedAt: number | undefined
}

type Answer = (res: ServerResponse, seen: Seen) => Promise<void>

/** An OpenAI Chat upstream that answers each request as its key (`Bearer sk-<key>`) says. */
async function startKeyedUpstream(answers: Readonly<Record<string, Answer>>) {
  const seen: Seen[] = []
  const arrived = new Map<string, ReturnType<typeof latch>>()
  const arrival = (key: string) => {
    let entry = arrived.get(key)
    if (entry === undefined) {
      entry = latch()
      arrived.set(key, entry)
    }
    return entry
  }
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const key = (req.headers.authorization ?? '').replace(/^Bearer sk-/, '')
    const record: Seen = { key, closedAt: undefined, finishedAt: undefined }
    seen.push(record)
    const closed = () => {
      if (record.finishedAt === undefined) record.closedAt ??= performance.now()
    }
    res.on('close', () => {
      if (!res.writableFinished) closed()
    })
    req.socket.on('close', () => {
      if (!res.writableFinished) closed()
    })
    res.on('finish', () => {
      record.finishedAt = performance.now()
    })
    req.resume()
    req.on('end', () => {
      arrival(key).open()
      const answer = answers[key]
      if (answer === undefined) {
        res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{}}')
        return
      }
      void answer(res, record)
    })
  })
  const url = await listen(server)
  return { url, seen, arrival }
}

/** Headers and the role-only preamble, then nothing: a stream stuck in prefill. */
async function stall(res: ServerResponse): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'x-request-id': 'req-slow' })
  res.write(chunk('chatcmpl-slow', { role: 'assistant', content: '' }))
}

/**
 * The whole answer, a word at a time; before its last frame it waits for `hold` (e.g. the
 * stalled request's close), so "closed before the winner's stream ended" is an order, not a
 * race.
 */
function answerAfter(before: () => Promise<unknown>, hold: () => Promise<unknown>): Answer {
  return async (res) => {
    await before()
    res.writeHead(200, { 'content-type': 'text/event-stream', 'x-request-id': 'req-fast' })
    res.write(chunk('chatcmpl-fast', { role: 'assistant', content: '' }))
    for (const word of fastText.split(/(?<= )/)) {
      res.write(chunk('chatcmpl-fast', { content: word }))
      await new Promise((resolve) => setTimeout(resolve, 2))
    }
    await hold()
    res.end(`${chunk('chatcmpl-fast', {}, 'stop')}data: [DONE]\n\n`)
  }
}

/** `relay()` behind `node:http` over a memory pool of `keys`, in key order (round-robin). */
async function startGateway(upstreamUrl: string, keys: readonly string[], policy: RelayPolicy) {
  const pool = createMemoryKeyPool(keys.map((id) => ({ id, secret: `sk-${id}` })))
  const outcomes: RelayOutcome[] = []
  const events: { kind: 'hedge' | 'commit' | 'retry'; attempt: number; at: number }[] = []
  let heads = 0
  const server = createServer((req, res) => {
    const writeHead = res.writeHead
    res.writeHead = function (this: ServerResponse, ...args: unknown[]) {
      heads++
      return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args)
    } as ServerResponse['writeHead']
    const parts: Buffer[] = []
    req.on('data', (part: Buffer) => parts.push(part))
    req.on('end', async () => {
      const body = Buffer.concat(parts).toString()
      const outcome = await relay({
        sink: nodeSink(res),
        signal: clientSignal(req, res),
        pool,
        adapter: openaiChat,
        policy,
        hooks: {
          onHedge: ({ attemptNumber }) =>
            events.push({ kind: 'hedge', attempt: attemptNumber, at: performance.now() }),
          onCommit: ({ attemptNumber }) =>
            events.push({ kind: 'commit', attempt: attemptNumber, at: performance.now() }),
          onRetry: ({ attemptNumber }) =>
            events.push({ kind: 'retry', attempt: attemptNumber, at: performance.now() }),
        },
        attempt: ({ key, signal }) =>
          fetch(`${upstreamUrl}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
            body,
            signal,
          }),
      })
      outcomes.push(outcome)
    })
  })
  const url = await listen(server)
  return {
    url,
    pool,
    outcomes,
    events,
    get heads() {
      return heads
    },
  }
}

/** Every request hedged after 100 ms: budget 1 allows one hedge per request. */
const hedged = (extra: RelayPolicy = {}): RelayPolicy => ({
  hedge: createHedging({ afterMs: 100, budget: 1 }),
  peek: { firstByteTimeoutMs: 10_000, firstOutputTimeoutMs: 10_000 },
  keepAliveIntervalMs: Number.POSITIVE_INFINITY,
  ...extra,
})

async function chat(url: string): Promise<string> {
  const openai = new OpenAI({ apiKey: 'sk-client', baseURL: `${url}/v1`, maxRetries: 0 })
  const stream = await openai.chat.completions.create({
    model: 'm',
    messages: [{ role: 'user', content: 'Say the pangram.' }],
    stream: true,
  })
  let text = ''
  for await (const part of stream) text += part.choices[0]?.delta?.content ?? ''
  return text
}

async function lastOutcome(gateway: { outcomes: RelayOutcome[] }): Promise<RelayOutcome> {
  await vi.waitFor(() => expect(gateway.outcomes).toHaveLength(1))
  return gateway.outcomes[0] as RelayOutcome
}

describe('hedging over real HTTP: key "slow" stalls in prefill, key "fast" answers', () => {
  it('the hedge wins, the client gets only the fast text, and the stalled upstream connection closes before the winner ends', async () => {
    // Each stalled request's close, in order; the fast answer's last frame waits for it.
    const slowCloses: ReturnType<typeof latch>[] = []
    const upstream = await startKeyedUpstream({
      slow: async (res) => {
        const closed = latch()
        slowCloses.push(closed)
        res.once('close', closed.open)
        await stall(res)
      },
      fast: answerAfter(
        async () => {},
        () => (slowCloses.at(-1) ?? latch()).wait(),
      ),
    })
    const gateway = await startGateway(upstream.url, ['slow', 'fast'], hedged())

    // Twice: a cold process first, then warm. Round-robin leases "slow" first both times.
    for (const [index, label] of ['cold', 'warm'].entries()) {
      expect(await chat(gateway.url)).toBe(fastText)
      await vi.waitFor(() => expect(gateway.outcomes).toHaveLength(index + 1))
      const outcome = gateway.outcomes[index] as RelayOutcome
      expect(outcome).toMatchObject({
        kind: 'committed',
        keyId: 'fast',
        hedges: { started: 1, cancelled: 1, wonByHedge: true },
        attempts: [
          { keyId: 'slow', result: 'hedge-lost' },
          { keyId: 'fast', result: 'committed', hedgeOf: outcome.attempts[0]?.attemptNumber },
        ],
      })
      expect(outcome.attempts).toHaveLength(2)
      const [slow, fast] = upstream.seen.slice(2 * index) as [Seen, Seen]
      expect([slow.key, fast.key]).toEqual(['slow', 'fast'])
      // The stalled upstream saw its connection closed, and before the winner's stream ended.
      expect(slow.closedAt).toBeDefined()
      expect(fast.finishedAt).toBeDefined()
      expect(slow.closedAt as number).toBeLessThan(fast.finishedAt as number)
      const commits = gateway.events.filter((event) => event.kind === 'commit')
      expect(commits).toHaveLength(index + 1)
      const gapMs = (slow.closedAt as number) - (commits[index]?.at as number)
      console.log(
        `hedging-http (${label}): the stalled upstream saw its connection close ${gapMs.toFixed(1)} ms after the winner's first output`,
      )
      expect(gapMs).toBeLessThan(1000)
    }
    // Every lease came back, each loser's reported cancelled: no key was blamed.
    const stats = await gateway.pool.stats()
    expect(stats.reduce((n, key) => n + key.inflight, 0)).toBe(0)
    const counts = (id: string) => {
      const outcomes: Record<string, number> = { ...stats.find((key) => key.id === id)?.outcomes }
      return Object.fromEntries(Object.entries(outcomes).filter(([, count]) => count > 0))
    }
    expect(counts('slow')).toEqual({ cancelled: 2 })
    expect(counts('fast')).toEqual({ success: 2 })
  })

  it("with early headers: the head is written once, before any output, and the content is only the winner's", async () => {
    const clientHasHead = latch()
    const upstream = await startKeyedUpstream({
      slow: stall,
      // The winner's output waits for the client to hold the head: early, not at commit.
      fast: answerAfter(clientHasHead.wait, async () => {}),
    })
    const gateway = await startGateway(
      upstream.url,
      ['slow', 'fast'],
      hedged({ earlyHeaders: true }),
    )

    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    })
    const headAt = performance.now()
    clientHasHead.open()
    expect(response.status).toBe(200)
    const body = await response.text()

    const commit = gateway.events.find((event) => event.kind === 'commit')
    expect(commit).toBeDefined()
    expect(headAt).toBeLessThan(commit?.at as number)
    expect(gateway.heads).toBe(1)
    const ids = new Set(body.match(/chatcmpl-[a-z]+/g))
    expect([...ids]).toEqual(['chatcmpl-fast'])
    const text = [...body.matchAll(/"content":"([^"]*)"/g)].map((match) => match[1]).join('')
    expect(text).toBe(fastText)
    expect(body.endsWith('data: [DONE]\n\n')).toBe(true)
    expect(await lastOutcome(gateway)).toMatchObject({
      kind: 'committed',
      keyId: 'fast',
      hedges: { started: 1, cancelled: 1, wonByHedge: true },
    })
  })

  it("the first attempt fails (500) while the hedge runs: the client gets the hedge's answer, with no retry and no backoff", async () => {
    const upstream = await startKeyedUpstream({
      // Fails only once the hedge has reached the upstream: the hedge is running by then.
      flaky: async (res) => {
        await upstream.arrival('fast').wait()
        res.writeHead(500, { 'content-type': 'application/json' })
        res.end('{"error":{"message":"internal error","type":"server_error"}}')
      },
      // Shows output only after the first attempt's 500 was sent.
      fast: answerAfter(
        () =>
          vi.waitFor(() => expect(upstream.seen[0]?.finishedAt).toBeDefined(), {
            timeout: fallbackMs,
          }),
        async () => {},
      ),
    })
    // A backoff this long would time the test out: the survivor must carry on at once.
    const gateway = await startGateway(
      upstream.url,
      ['flaky', 'fast'],
      hedged({ backoff: { baseMs: 60_000, maxMs: 60_000, jitter: 0 } }),
    )

    expect(await chat(gateway.url)).toBe(fastText)

    const outcome = await lastOutcome(gateway)
    expect(outcome).toMatchObject({
      kind: 'committed',
      keyId: 'fast',
      hedges: { started: 1, cancelled: 0, wonByHedge: true },
      attempts: [
        { attemptNumber: 1, keyId: 'flaky', status: 500, result: 'status-500' },
        { attemptNumber: 2, keyId: 'fast', result: 'committed', hedgeOf: 1 },
      ],
    })
    expect(outcome.attempts).toHaveLength(2)
    expect(upstream.seen).toHaveLength(2)
    expect(gateway.events.filter((event) => event.kind === 'retry')).toEqual([])
    const stats = await gateway.pool.stats()
    expect(stats.reduce((n, key) => n + key.inflight, 0)).toBe(0)
  })

  it('the client leaves while both attempts stall: both upstream connections close, the outcome is client-gone, no key is blamed', async () => {
    const closes = [latch(), latch()]
    const upstream = await startKeyedUpstream({
      slow: async (res) => {
        res.once('close', (closes[0] as ReturnType<typeof latch>).open)
        await stall(res)
      },
      other: async (res) => {
        res.once('close', (closes[1] as ReturnType<typeof latch>).open)
        await stall(res)
      },
    })
    const gateway = await startGateway(upstream.url, ['slow', 'other'], hedged())
    const client = new AbortController()
    const request = fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
      signal: client.signal,
    }).catch((error: unknown) => error)
    // Leave once the hedge is running upstream.
    await upstream.arrival('other').wait()
    client.abort()
    expect(await request).toBeInstanceOf(Error)

    expect(await Promise.all(closes.map((closed) => closed.wait()))).toEqual([true, true])
    const outcome = await lastOutcome(gateway)
    expect(outcome.kind).toBe('client-gone')
    expect(outcome.attempts.map((attempt) => attempt.keyId)).toEqual(['slow', 'other'])
    const stats = await gateway.pool.stats()
    expect(stats.reduce((n, key) => n + key.inflight, 0)).toBe(0)
    for (const key of stats) {
      expect(key.outcomes).toMatchObject({ 'server-error': 0, 'rate-limited': 0, success: 0 })
    }
  })

  it('the deadline passes while both attempts stall: one honest 504, both upstream connections closed', async () => {
    const upstream = await startKeyedUpstream({ slow: stall, other: stall })
    const gateway = await startGateway(upstream.url, ['slow', 'other'], hedged({ deadlineMs: 400 }))
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    })
    expect(response.status).toBe(504)
    expect(JSON.parse(await response.text())).toHaveProperty('error.message')
    const outcome = await lastOutcome(gateway)
    expect(outcome).toMatchObject({ kind: 'failed', status: 504 })
    expect(outcome.attempts.map((attempt) => attempt.keyId)).toEqual(['slow', 'other'])
    await vi.waitFor(() => {
      expect(upstream.seen.map((seen) => seen.closedAt !== undefined)).toEqual([true, true])
    })
    const stats = await gateway.pool.stats()
    expect(stats.reduce((n, key) => n + key.inflight, 0)).toBe(0)
    for (const key of stats) expect(key.outcomes).toMatchObject({ 'server-error': 0, success: 0 })
  })
})
