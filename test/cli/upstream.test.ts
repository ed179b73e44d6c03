/**
 * `stream-boundary upstream`: the faulty upstream served alone, on a port, scenarios chosen by
 * name; a gateway of one's own is driven with the `x-fault-scenario` header or the marker.
 */

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { type CliIo, runCli } from '../../src/cli/main.js'

function capture(until: AbortSignal): CliIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = []
  const stderr: string[] = []
  return {
    stdout,
    stderr,
    out: (text) => stdout.push(text),
    err: (text) => stderr.push(text),
    until,
  }
}

/** Waits until `lines` has a line matching `pattern`. */
async function line(lines: readonly string[], pattern: RegExp): Promise<RegExpExecArray> {
  for (let waited = 0; waited < 10_000; waited += 10) {
    for (const text of lines) {
      const match = pattern.exec(text)
      if (match !== null) return match
    }
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error(`no line matched ${pattern}: ${lines.join('\n')}`)
}

describe('stream-boundary upstream', () => {
  it('serves chosen chaos scenarios and scenarios of one own, refuses names it does not serve, and stops when told', async () => {
    const controller = new AbortController()
    const io = capture(controller.signal)
    const exit = runCli(
      [
        'upstream',
        '--protocol',
        'openai-chat',
        '--scenarios',
        'ok,empty',
        '--scenario',
        'flaky=rate-limited,ok',
      ],
      io,
    )
    const [, baseURL = ''] = await line(io.stdout, /^openai-chat base URL: (\S+)$/)
    expect(baseURL).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/)
    expect(io.stdout).toContain('scenarios (3): ok, empty, flaky')

    const client = (scenario: string) =>
      new OpenAI({
        apiKey: 'sk-test',
        baseURL,
        maxRetries: 0,
        defaultHeaders: { 'x-fault-scenario': scenario },
      })
    const ask = (scenario: string) =>
      client(scenario).chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
      })
    await expect(ask('flaky')).rejects.toMatchObject({ status: 429 })
    expect((await ask('flaky')).choices[0]?.message.content).toBe(
      'The quick brown fox jumps over the lazy dog.',
    )
    await expect(ask('flakey')).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/unknown scenario "flakey"; did you mean "flaky"\?/),
    })
    // Chaos's own scripts: `empty` is one empty attempt, then a good one.
    const stream = await client('empty').chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    })
    let chunks = 0
    for await (const _ of stream) chunks++
    expect(chunks).toBe(0)

    controller.abort()
    expect(await exit).toBe(0)
    await expect(fetch(`${baseURL}/chat/completions`, { method: 'POST' })).rejects.toThrow()
  })

  it.each([
    [['--scenarios', 'nope'], /--scenarios: unknown scenario "nope"/],
    [
      ['--scenario', 'x=keepalive-only'],
      /--scenario: .*unknown fault "keepalive-only"; did you mean "keepalives-only"\?/,
    ],
    [['--scenario', 'no-faults='], /--scenario must be name=fault,fault/],
    [['--port', 'eighty'], /--port must be an integer from 0 to 65535/],
    [['--protocol', 'grpc'], /--protocol must be one of openai-chat/],
    [['--stall-ms', '0'], /--stall-ms must be an integer >= 1 or Infinity/],
  ])('%j is a usage error (exit 2) naming the flag', async (args, message) => {
    const io = capture(AbortSignal.abort())
    expect(await runCli(['upstream', ...args], io)).toBe(2)
    expect(io.stderr.join('\n')).toMatch(message)
  })

  it.runIf(process.platform !== 'win32')(
    'the bin serves until SIGTERM, then exits 0',
    async () => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', 'src/cli/bin.ts', 'upstream', '--scenario', 'cut=partial-then-cut'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      )
      const out: string[] = []
      child.stdout.setEncoding('utf8').on('data', (text: string) => out.push(...text.split('\n')))
      try {
        const [, url] = await line(out, /^faulty upstream listening on (\S+)$/)
        const response = await fetch(`${url}/v1/messages`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-fault-scenario': 'cut' },
          body: JSON.stringify({ model: 'm', max_tokens: 10, messages: [] }),
        })
        expect(response.status).toBe(200)
        const body = await response.text()
        expect(() => JSON.parse(body)).toThrow()
      } finally {
        child.kill('SIGTERM')
      }
      const [code] = await once(child, 'exit')
      expect(code).toBe(0)
    },
    30_000,
  )
})
