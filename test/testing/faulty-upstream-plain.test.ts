/**
 * Every fault of the faulty upstream on a plain (non-streaming) request: played as what a plain
 * answer suffers from the same failure, or refused with an error that names it; never a
 * complete 200 for a fault recorded as played. And a scenario name it was not given is an
 * error, not a healthy answer.
 */

import { afterEach, describe, expect, it } from 'vitest'
import { chaosMarker } from '../../src/testing/chaos-marker.js'
import type { Fault, FaultKind } from '../../src/testing/faults.js'
import { createFaultyUpstream, type FaultyUpstream } from '../../src/testing/faulty-upstream.js'

const text = 'Hello there plain world of answers'
const base = 'http://upstream.test'

/** Each protocol's plain endpoint. */
const protocols = [
  { name: 'openai-chat', path: '/v1/chat/completions' },
  { name: 'openai-responses', path: '/v1/responses' },
  { name: 'anthropic-messages', path: '/v1/messages' },
  { name: 'gemini', path: '/v1beta/models/x:generateContent' },
] as const

const upstreams: FaultyUpstream[] = []

afterEach(async () => {
  await Promise.all(upstreams.splice(0).map((upstream) => upstream.close()))
})

function open(fault: Fault | FaultKind): FaultyUpstream {
  const upstream = createFaultyUpstream({ text, keepAliveMs: 10, scenarios: { s: [fault] } })
  upstreams.push(upstream)
  return upstream
}

function plain(scenario: string | undefined, signal?: AbortSignal): RequestInit {
  return {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(scenario === undefined ? {} : { 'x-fault-scenario': scenario }),
    },
    body: JSON.stringify({ model: 'test-model', max_tokens: 100 }),
    ...(signal === undefined ? {} : { signal }),
  }
}

/** The whole plain answer of a protocol, as the `ok` fault gives it. */
async function wholeAnswer(path: string): Promise<string> {
  return (await open('ok').fetch(`${base}${path}`, plain('s'))).text()
}

function parses(body: string): boolean {
  try {
    JSON.parse(body)
    return true
  } catch {
    return false
  }
}

/** What a plain request gets under each fault; a table the compiler keeps complete. */
interface Expected {
  readonly fault: Fault
  check(response: Response, path: string): Promise<void>
}

const completeWithText = async (response: Response) => {
  expect(response.status).toBe(200)
  const body = await response.text()
  expect(parses(body)).toBe(true)
  expect(body).toContain(text)
}

const cutShort = async (response: Response, path: string) => {
  expect(response.status).toBe(200)
  const body = await response.text()
  const whole = await wholeAnswer(path)
  expect(body.length).toBeGreaterThan(0)
  expect(body.length).toBeLessThan(whole.length)
  expect(whole.startsWith(body)).toBe(true)
  expect(parses(body)).toBe(false)
}

const errorBody = async (response: Response, status: number) => {
  expect(response.status).toBe(status)
  const body = JSON.parse(await response.text()) as Record<string, unknown>
  expect(JSON.stringify(body)).toMatch(/"error"/)
  expect(JSON.stringify(body)).not.toContain(text)
}

const expected: Record<FaultKind, Expected> = {
  ok: { fault: { kind: 'ok' }, check: completeWithText },
  'slow-drip': { fault: { kind: 'slow-drip', delayMs: 2 }, check: completeWithText },
  'streaming-unsupported': { fault: { kind: 'streaming-unsupported' }, check: completeWithText },
  'context-overflow': { fault: { kind: 'context-overflow' }, check: completeWithText },
  empty: {
    fault: { kind: 'empty' },
    async check(response) {
      expect(response.status).toBe(200)
      expect(await response.text()).toBe('')
    },
  },
  'hang-before-headers': { fault: { kind: 'hang-before-headers' }, check: async () => {} },
  'headers-then-hang': {
    fault: { kind: 'headers-then-hang' },
    async check(response) {
      expect(response.status).toBe(200)
      await expect(response.text()).rejects.toThrow()
    },
  },
  'keepalives-only': {
    fault: { kind: 'keepalives-only', forMs: 30 },
    async check(response) {
      expect(response.status).toBe(200)
      const body = await response.text()
      expect(body).toMatch(/^\s+$/)
    },
  },
  'role-only-then-stall': {
    fault: { kind: 'role-only-then-stall', forMs: 20 },
    async check(response) {
      expect(response.status).toBe(200)
      expect(await response.text()).toBe('')
    },
  },
  'error-frame': { fault: { kind: 'error-frame' }, check: (r) => errorBody(r, 200) },
  'fatal-error-frame': { fault: { kind: 'fatal-error-frame' }, check: (r) => errorBody(r, 200) },
  'rate-limited': { fault: { kind: 'rate-limited' }, check: (r) => errorBody(r, 429) },
  overloaded: { fault: { kind: 'overloaded' }, check: (r) => errorBody(r, 529) },
  'json-error-200': { fault: { kind: 'json-error-200' }, check: (r) => errorBody(r, 200) },
  'html-500': {
    fault: { kind: 'html-500' },
    async check(response) {
      expect(response.status).toBe(500)
      expect(await response.text()).toMatch(/^<!DOCTYPE html>/)
    },
  },
  'html-200': {
    fault: { kind: 'html-200' },
    async check(response) {
      expect(response.status).toBe(200)
      expect(await response.text()).toMatch(/^<!DOCTYPE html>/)
    },
  },
  'partial-then-cut': { fault: { kind: 'partial-then-cut' }, check: cutShort },
  'eof-mid-frame': { fault: { kind: 'eof-mid-frame' }, check: cutShort },
  'eof-mid-frame-close': { fault: { kind: 'eof-mid-frame-close' }, check: cutShort },
  'reset-mid-frame': {
    fault: { kind: 'reset-mid-frame' },
    async check(response) {
      expect(response.status).toBe(200)
      await expect(response.text()).rejects.toThrow(/terminated/)
    },
  },
  'thinking-only': {
    fault: { kind: 'thinking-only' },
    async check(response) {
      expect(response.status).toBe(200)
      const body = await response.text()
      expect(parses(body)).toBe(true)
      expect(body).not.toContain(text)
    },
  },
  'oversized-frame': {
    fault: { kind: 'oversized-frame' },
    async check(response) {
      const body = await response.text()
      expect(parses(body)).toBe(true)
      expect(body.length).toBeGreaterThan(2 * 1024 * 1024)
    },
  },
  'invalid-utf8': {
    fault: { kind: 'invalid-utf8' },
    async check(response) {
      const bytes = new Uint8Array(await response.arrayBuffer())
      const at = bytes.indexOf(0xff)
      expect(at).toBeGreaterThan(0)
      expect(bytes[at + 1]).toBe(0xfe)
    },
  },
  'no-final-blank-line': {
    fault: { kind: 'no-final-blank-line' },
    async check(response) {
      expect(response.status).toBe(501)
      expect(await response.text()).toMatch(/no-final-blank-line is a fault of SSE framing/)
    },
  },
}

describe('createFaultyUpstream: every fault on a non-streaming request', () => {
  const cases = protocols.flatMap((protocol) =>
    Object.entries(expected).map(([kind, entry]) => ({ protocol, kind, entry })),
  )

  it.each(cases)(
    '$kind on a plain $protocol.name request is played or refused, never a complete 200 for a fault',
    async ({ protocol, kind, entry }) => {
      const upstream = open(entry.fault)
      const url = `${base}${protocol.path}`
      if (kind === 'hang-before-headers') {
        await expect(upstream.fetch(url, plain('s', AbortSignal.timeout(30)))).rejects.toBeDefined()
      } else {
        const signal = kind === 'headers-then-hang' ? AbortSignal.timeout(30) : undefined
        await entry.check(await upstream.fetch(url, plain('s', signal)), protocol.path)
      }
      expect(upstream.requests).toMatchObject([
        { scenario: 's', fault: kind, streaming: false, protocol: protocol.name },
      ])
    },
  )
})

describe('createFaultyUpstream: scenario names it was not given', () => {
  it('an unknown x-fault-scenario is a 400 naming it and the known ones, not an ok answer', async () => {
    const upstream = open('empty')
    const response = await upstream.fetch(`${base}/v1/chat/completions`, plain('z'))
    expect(response.status).toBe(400)
    const body = await response.text()
    expect(body).toMatch(/unknown scenario \\"z\\"; did you mean \\"s\\"\? \(known: s\)/)
    expect(body).not.toContain(text)
    expect(upstream.requests).toEqual([])
  })

  it('an unknown scenario in the chaos marker is refused the same way', async () => {
    const upstream = open('ok')
    const response = await upstream.fetch(`${base}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        messages: [
          {
            role: 'user',
            content: `hi ${chaosMarker({ scenario: 'typo-name', requestId: 'r1' })}`,
          },
        ],
      }),
    })
    expect(response.status).toBe(400)
    expect(await response.text()).toMatch(/unknown scenario \\"typo-name\\"/)
  })

  it('a request naming no scenario still plays default, ok unless given', async () => {
    const upstream = open('empty')
    const response = await upstream.fetch(`${base}/v1/chat/completions`, plain(undefined))
    await completeWithText(response)
    expect(upstream.requests).toMatchObject([{ scenario: 'default', fault: 'ok' }])
  })
})
