import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { startPlainRelay } from '../../examples/plain-relay.js'
import { parseChaosArgs } from '../../src/cli/args.js'
import { type CliIo, runCli } from '../../src/cli/main.js'
import type { ChaosReport } from '../../src/cli/run.js'
import { createMemoryKeyPool, type KeySelection } from '../../src/index.js'
import { startChaosGateway } from './example-gateway.js'

const closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close()
})

function capture(): CliIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = []
  const stderr: string[] = []
  return { stdout, stderr, out: (text) => stdout.push(text), err: (text) => stderr.push(text) }
}

/** Processes of a process group still running (zombies left to an init that does not reap are done). */
function runningInGroup(pgid: number): string[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .flatMap((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
        const [state, , group] = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
        return Number(group) === pgid && state !== 'Z' ? [`${pid} ${state}`] : []
      } catch {
        return []
      }
    })
}

/** A port that was free a moment ago (the upstream must be known before the gateway starts). */
async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

async function chaos(
  args: string[],
): Promise<{ code: number; report: ChaosReport; io: ReturnType<typeof capture> }> {
  const io = capture()
  const code = await runCli(['chaos', ...args, '--json'], io)
  return { code, report: JSON.parse(io.stdout.join('\n')) as ChaosReport, io }
}

describe('stream-boundary chaos: --stall-ms is a bound like every other', () => {
  const base = ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini']
  it('Infinity makes the stalls endless; an integer bounds them; none takes the default', () => {
    expect(parseChaosArgs([...base, '--stall-ms', 'Infinity']).stallMs).toBe(
      Number.POSITIVE_INFINITY,
    )
    expect(parseChaosArgs([...base, '--stall-ms', '250']).stallMs).toBe(250)
    expect(parseChaosArgs(base).stallMs).toBe(20_000)
  })

  it('every bound flag with a value in the docs is one the command accepts', () => {
    const pages = [
      'README.md',
      ...readdirSync('docs')
        .filter((name) => name.endsWith('.md'))
        .map((name) => join('docs', name)),
    ]
    const shown = pages.flatMap((page) =>
      [
        ...readFileSync(page, 'utf8').matchAll(
          /--(stall-ms|hang-ms|start-timeout-ms)[ =](\d+|Infinity)\b/g,
        ),
      ].map((match) => ({ page, flag: `--${match[1]}`, value: match[2] as string })),
    )
    expect(shown.map((each) => each.flag)).toContain('--stall-ms')
    for (const { page, flag, value } of shown) {
      expect(
        () => parseChaosArgs([...base, flag, value]),
        `${page}: ${flag} ${value}`,
      ).not.toThrow()
    }
  })
})

describe('stream-boundary chaos: bad arguments exit 2 with a message naming the flag', () => {
  const cases: [string[], RegExp][] = [
    [['--protocol', 'openai-chat'], /--target is required/],
    [
      ['--target', 'ftp://x', '--protocol', 'openai-chat'],
      /--target must be an http:\/\/ URL, got "ftp:\/\/x"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'grpc'],
      /--protocol must be one of openai-chat, openai-responses, anthropic-messages, gemini, got "grpc"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--scenarios', 'ok,nope'],
      /--scenarios: unknown scenario "nope"; known: all, ok, empty/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--fault-rate', '1.5'],
      /--fault-rate must be a number from 0 to 1, got "1.5"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--concurrency', '0'],
      /--concurrency must be an integer >= 1, got "0"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--upstream-port', '70000'],
      /--upstream-port must be an integer from 0 to 65535, got "70000"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--hang-ms', 'soon'],
      /--hang-ms must be an integer from 100 to 2147483647, got "soon"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--stall-ms', '1.5'],
      /--stall-ms must be an integer from 1 to 2147483647 or Infinity, got "1.5"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--stall-ms', '0'],
      /--stall-ms must be an integer from 1 to 2147483647 or Infinity, got "0"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--stall-ms', '2147483648'],
      /--stall-ms must be an integer from 1 to 2147483647 or Infinity, got "2147483648"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--hang-ms', '2147483648'],
      /--hang-ms must be an integer from 100 to 2147483647, got "2147483648"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--start-timeout-ms', '1e10'],
      /--start-timeout-ms must be an integer from 100 to 2147483647, got "1e10"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--bogus'],
      /Unknown option '--bogus'/,
    ],
    [
      [
        '--target',
        'http://127.0.0.1:1',
        '--protocol',
        'gemini',
        '--selection',
        'random',
        '--gateway',
        'true',
      ],
      /--selection must be one of round-robin, weighted, least-inflight, headroom, fastest, got "random"/,
    ],
    [
      ['--target', 'http://127.0.0.1:1', '--protocol', 'gemini', '--selection', 'round-robin'],
      /--selection needs --gateway/,
    ],
  ]
  it.each(cases)('%j', async (args, message) => {
    const io = capture()
    expect(await runCli(['chaos', ...args], io)).toBe(2)
    expect(io.stderr.join('\n')).toMatch(message)
    expect(io.stdout).toEqual([])
  })

  it('a malformed --header is refused without echoing its value', async () => {
    const io = capture()
    const args = [
      'chaos',
      '--target',
      'http://127.0.0.1:1',
      '--protocol',
      'gemini',
      '--header',
      'sk-secret-value-123',
    ]
    expect(await runCli(args, io)).toBe(2)
    expect(io.stderr.join('\n')).toMatch(/--header must be "name: value"/)
    expect(io.stderr.join('\n')).not.toContain('secret-value')
  })

  it('an unknown command exits 2; --help exits 0 with the usage', async () => {
    const io = capture()
    expect(await runCli(['fuzz'], io)).toBe(2)
    expect(io.stderr.join('\n')).toMatch(/unknown command "fuzz"/)
    const help = capture()
    expect(await runCli(['chaos', '--help'], help)).toBe(0)
    expect(help.stdout.join('\n')).toMatch(/^Usage: stream-boundary chaos --target <url>/)
  })

  it('a gateway command that never listens exits 2 and shows its output, keys redacted', async () => {
    const io = capture()
    const port = await freePort()
    const args = [
      'chaos',
      '--target',
      `http://127.0.0.1:${port}/v1`,
      '--protocol',
      'openai-chat',
      '--gateway',
      `GATEWAY_KEYS=a:sk-chaos-secret-0123456789 sh -c 'echo gateway-says-boom with $GATEWAY_KEYS; exit 3'`,
      '--start-timeout-ms',
      '300',
    ]
    expect(await runCli(args, io)).toBe(2)
    const stderr = io.stderr.join('\n')
    expect(stderr).toMatch(/gateway: started pid \d+: GATEWAY_KEYS=\[redacted\] sh -c/)
    expect(stderr).toMatch(
      /the gateway exited \(exit code 3\)[\s\S]*gateway-says-boom with a:\[redacted\]/,
    )
    // Neither the command line nor the gateway's own output is echoed with the key in it.
    expect(stderr).not.toContain('sk-chaos-secret')
  })

  it('--selection reaches the started gateway as KEY_SELECTION and {selection}', async () => {
    const io = capture()
    const port = await freePort()
    const args = [
      'chaos',
      '--target',
      `http://127.0.0.1:${port}/v1`,
      '--protocol',
      'openai-chat',
      '--selection',
      'least-inflight',
      '--gateway',
      `sh -c 'echo env=$KEY_SELECTION arg={selection}; exit 3'`,
    ]
    expect(await runCli(args, io)).toBe(2)
    expect(io.stderr.join('\n')).toMatch(/env=least-inflight arg=least-inflight/)
  })

  it('a gateway command that exits before listening is reported at once (not after the 20 s start bound), with its exit code and the last lines of its output', async () => {
    const io = capture()
    const port = await freePort()
    const lines = Array.from({ length: 30 }, (_, index) => `echo line-${index} >&2`).join('; ')
    const args = [
      'chaos',
      '--target',
      `http://127.0.0.1:${port}/v1`,
      '--protocol',
      'openai-chat',
      '--gateway',
      `sh -c '${lines}; echo "Error: listen EADDRINUSE" >&2; exit 3'`,
    ]
    const started = performance.now()
    expect(await runCli(args, io)).toBe(2)
    expect(performance.now() - started).toBeLessThan(5_000)
    const stderr = io.stderr.join('\n')
    expect(stderr).toMatch(
      new RegExp(
        `the gateway exited \\(exit code 3\\) before 127\\.0\\.0\\.1:${port} accepted a connection`,
      ),
    )
    expect(stderr).toMatch(
      /gateway output \(last lines\):\n[\s\S]*line-29\nError: listen EADDRINUSE/,
    )
    // The last lines, not all of them.
    expect(stderr).not.toMatch(/line-5\n/)
    expect(stderr).not.toMatch(/accepted no connection/)
  })

  it('a gateway command that runs but never listens waits out --start-timeout-ms', async () => {
    const io = capture()
    const port = await freePort()
    const args = [
      'chaos',
      '--target',
      `http://127.0.0.1:${port}/v1`,
      '--protocol',
      'openai-chat',
      '--gateway',
      `sh -c 'echo waiting-forever; sleep 30'`,
      '--start-timeout-ms',
      '300',
    ]
    expect(await runCli(args, io)).toBe(2)
    const stderr = io.stderr.join('\n')
    expect(stderr).toMatch(/accepted no connection in 300 ms[\s\S]*waiting-forever/)
    expect(stderr).not.toMatch(/the gateway exited/)
  })
})

describe('stream-boundary chaos: pointing it at any gateway', () => {
  it('{upstream} in --target, --model and --path: the upstream itself as the target answers every request', async () => {
    const { code, report } = await chaos([
      '--target',
      '{upstream}/v1',
      '--protocol',
      'openai-chat',
      '--model',
      'routed-model',
      '--path',
      '/chat/completions',
      '--scenarios',
      'ok,slow-drip',
    ])
    expect(code).toBe(0)
    expect(report.target).toBe(`${report.upstream}/v1`)
    expect(report.marks).toEqual({ '✓': 2, '✗': 0, 'n/a': 0 })
  })

  it("--dump writes what each scenario's client got, and it reads back", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'chaos-dump-'))
    closers.push(async () => rmSync(dir, { recursive: true, force: true }))
    const { code } = await chaos([
      '--target',
      '{upstream}/v1',
      '--protocol',
      'openai-chat',
      '--scenarios',
      'ok,html-200',
      '--dump',
      dir,
    ])
    expect(code).toBe(1)
    const ok = JSON.parse(readFileSync(join(dir, 'ok.json'), 'utf8'))
    expect(ok).toMatchObject({
      scenario: 'ok',
      status: 200,
      end: 'eof',
      judgement: { kind: 'full' },
      headers: { 'content-type': expect.stringMatching(/text\/event-stream/) },
    })
    expect(readFileSync(join(dir, 'ok.body'), 'utf8')).toContain('data: [DONE]')
    const page = JSON.parse(readFileSync(join(dir, 'html-200.json'), 'utf8'))
    expect(page).toMatchObject({ status: 200, judgement: { kind: 'silent-empty' } })
    expect(readFileSync(join(dir, 'html-200.body'), 'utf8')).toMatch(/<title>/)
  })

  it('--path must be a path; a hang is reported with a hint about --hang-ms', async () => {
    const io = capture()
    expect(
      await runCli(
        ['chaos', '--target', 'http://127.0.0.1:1/v1', '--protocol', 'gemini', '--path', 'x'],
        io,
      ),
    ).toBe(2)
    expect(io.stderr.join('\n')).toMatch(/--path must start with \//)
    const hang = capture()
    const code = await runCli(
      [
        'chaos',
        '--target',
        '{upstream}/v1',
        '--protocol',
        'openai-chat',
        '--scenarios',
        'headers-then-hang',
        '--hang-ms',
        '300',
      ],
      hang,
    )
    expect(code).toBe(1)
    expect(hang.stdout.join('\n')).toMatch(/1 hang at the hang bound \(300 ms\).*--hang-ms/)
  })
})

describe('stream-boundary chaos: it scores the gateway it started, and only that', () => {
  it('a target port already in use before --gateway starts is refused (exit 2), nothing is scored', async () => {
    const stale = createServer((socket) => socket.destroy())
    await new Promise<void>((resolve) => stale.listen(0, '127.0.0.1', resolve))
    closers.push(() => new Promise<void>((resolve) => stale.close(() => resolve())))
    const port = (stale.address() as { port: number }).port
    const io = capture()
    const code = await runCli(
      [
        'chaos',
        '--target',
        `http://127.0.0.1:${port}/v1`,
        '--protocol',
        'openai-chat',
        '--gateway',
        'sleep 30',
      ],
      io,
    )
    expect(code).toBe(2)
    expect(io.stderr.join('\n')).toMatch(/already in use before the gateway was started/)
    expect(io.stdout).toEqual([])
  })

  it('a gateway that exits mid-run stops the run (exit 2) with its exit code and the tail of its output', async () => {
    const port = await freePort()
    // Answers one request (the warm-up) with a 500, then dies with exit code 7.
    const gateway = `node -e "require('http').createServer((q,r)=>{q.resume();q.on('end',()=>{r.writeHead(500).end(()=>{console.error('gateway-crashing-now');process.exit(7)})})}).listen(${port},'127.0.0.1')"`
    const io = capture()
    const code = await runCli(
      [
        'chaos',
        '--target',
        `http://127.0.0.1:${port}/v1`,
        '--protocol',
        'openai-chat',
        '--gateway',
        gateway,
        '--scenarios',
        'ok,empty,html-500,html-200',
      ],
      io,
    )
    expect(code).toBe(2)
    const stderr = io.stderr.join('\n')
    expect(stderr).toMatch(/the gateway exited mid-run \(exit code 7\)/)
    expect(stderr).toMatch(/gateway-crashing-now/)
    expect(io.stdout).toEqual([])
  })
})

describe('stream-boundary chaos: the report', () => {
  it('against the plain relay: exit 1, silent failures counted, the --json shape', async () => {
    const upstreamPort = await freePort()
    const relay = await startPlainRelay(`http://127.0.0.1:${upstreamPort}`)
    closers.push(() => relay.close())
    const { code, report } = await chaos([
      '--target',
      `${relay.url}/v1`,
      '--protocol',
      'openai-chat',
      '--upstream-port',
      String(upstreamPort),
      '--scenarios',
      'ok,empty,html-200,partial-then-cut,rate-limited',
    ])
    expect(code).toBe(1)
    expect(report).toMatchObject({
      mode: 'scenarios',
      target: `${relay.url}/v1`,
      protocol: 'openai-chat',
      upstream: `http://127.0.0.1:${upstreamPort}`,
      load: null,
      exitCode: 1,
      counts: {
        requests: 5,
        answered: 1,
        honestErrors: 1,
        silentFailures: 3,
        duplicates: 0,
        hangs: 0,
      },
    })
    expect(report.durationMs).toBeGreaterThan(0)
    const byName = Object.fromEntries(report.scenarios.map((s) => [s.name, s]))
    // In the scorecard's order, whatever the order asked for.
    expect(Object.keys(byName)).toEqual([
      'ok',
      'empty',
      'rate-limited',
      'html-200',
      'partial-then-cut',
    ])
    expect(byName.ok).toMatchObject({
      mark: '✓',
      outcome: 'full',
      attempts: 1,
      expect: 'answer',
      upstreamHeldMs: null,
    })
    expect(byName.ok?.firstTokenMs).toBeGreaterThan(0)
    expect(byName.empty).toMatchObject({ mark: '✗', outcome: 'silent-empty', attempts: 1 })
    expect(byName['html-200']).toMatchObject({ mark: '✗', outcome: 'silent-empty' })
    expect(byName['partial-then-cut']).toMatchObject({ mark: '✗', outcome: 'silent-cut' })
    expect(byName['rate-limited']).toMatchObject({
      mark: '✗',
      outcome: 'honest-error',
      reason: 'HTTP 429 before any output, though a retry was still possible',
    })
  })

  it('against the example gateway: exit 0, retried scenarios answered, the upstream released on disconnect', async () => {
    const upstreamPort = await freePort()
    const gateway = await startChaosGateway(`http://127.0.0.1:${upstreamPort}`)
    closers.push(() => gateway.close())
    const { code, report, io } = await chaos([
      '--target',
      gateway.url,
      '--protocol',
      'anthropic-messages',
      '--upstream-port',
      String(upstreamPort),
      '--scenarios',
      'ok,empty,error-frame,overloaded,partial-then-cut,client-disconnect',
      '--concurrency',
      '3',
    ])
    expect(code).toBe(0)
    expect(report.counts).toEqual({
      requests: 6,
      answered: 4,
      honestErrors: 1,
      silentFailures: 0,
      duplicates: 0,
      hangs: 0,
    })
    const byName = Object.fromEntries(report.scenarios.map((s) => [s.name, s]))
    for (const name of ['empty', 'error-frame', 'overloaded'])
      expect(byName[name]).toMatchObject({ mark: '✓', outcome: 'full', attempts: 2 })
    expect(byName['partial-then-cut']).toMatchObject({
      mark: '✓',
      outcome: 'honest-error',
      attempts: 1,
    })
    expect(byName['client-disconnect']).toMatchObject({ mark: '✓', outcome: 'left' })
    expect(byName['client-disconnect']?.upstreamHeldMs).toBeLessThan(500)
    expect(io.stderr.join('\n')).toMatch(/^faulty upstream: http:\/\/127\.0\.0\.1:\d+/)
  })

  it('--expect-continuation: with continueAfterCut on in the example gateway, partial-then-cut and eof-mid-frame are answered whole', async () => {
    for (const [protocol, path] of [
      ['anthropic-messages', ''],
      ['openai-chat', '/v1'],
    ] as const) {
      const upstreamPort = await freePort()
      const gateway = await startChaosGateway(
        `http://127.0.0.1:${upstreamPort}`,
        0,
        undefined,
        true,
      )
      closers.push(() => gateway.close())
      const { code, report } = await chaos([
        '--target',
        `${gateway.url}${path}`,
        '--protocol',
        protocol,
        '--upstream-port',
        String(upstreamPort),
        '--scenarios',
        'ok,partial-then-cut,eof-mid-frame,reset-mid-frame',
        '--expect-continuation',
      ])
      expect(code, protocol).toBe(0)
      const byName = Object.fromEntries(report.scenarios.map((s) => [s.name, s]))
      for (const name of ['partial-then-cut', 'eof-mid-frame']) {
        expect(byName[name], `${protocol} ${name}`).toMatchObject({
          mark: '✓',
          outcome: 'full',
          expect: 'answer',
          attempts: 2,
        })
      }
      // Still 'answer-or-error' without the flag's promise; continued all the same.
      expect(byName['reset-mid-frame']).toMatchObject({ mark: '✓', outcome: 'full' })
    }
  })

  it('the table form ends with the summary line', async () => {
    const upstreamPort = await freePort()
    const relay = await startPlainRelay(`http://127.0.0.1:${upstreamPort}`)
    closers.push(() => relay.close())
    const io = capture()
    const code = await runCli(
      [
        'chaos',
        '--target',
        `${relay.url}/v1`,
        '--protocol',
        'openai-responses',
        '--upstream-port',
        String(upstreamPort),
        '--scenarios',
        'ok,thinking-only',
      ],
      io,
    )
    expect(code).toBe(1)
    const out = io.stdout.join('\n')
    expect(out).toMatch(/✓ +ok +answer +1 /)
    expect(out).toMatch(/✗ +thinking-only .*reasoning only: no answer, no error/)
    expect(out.split('\n').at(-1)).toMatch(
      /^FAIL: 1 ✓, 1 ✗, 0 n\/a; 2 requests, 1 answered, 0 honest errors, 1 silent failures, 0 duplicates, 0 hangs \(\d+\.\d s\)$/,
    )
  })

  it('PASS is impossible over a ✗: honest errors where a retry would have helped fail the run, unless --fail-on silent', async () => {
    const upstreamPort = await freePort()
    const relay = await startPlainRelay(`http://127.0.0.1:${upstreamPort}`)
    closers.push(() => relay.close())
    const args = [
      '--target',
      `${relay.url}/v1`,
      '--protocol',
      'openai-chat',
      '--upstream-port',
      String(upstreamPort),
      '--scenarios',
      'ok,rate-limited,overloaded',
    ]
    const strict = await chaos(args)
    expect(strict.report.counts.silentFailures).toBe(0)
    expect(strict.report.marks).toEqual({ '✓': 1, '✗': 2, 'n/a': 0 })
    expect(strict.code).toBe(1)
    const lenient = await chaos([...args, '--fail-on', 'silent'])
    expect(lenient.code).toBe(0)
  })

  it('nothing judged (a wrong target path: every scenario n/a) is exit 3 with a hint, never PASS', async () => {
    const upstreamPort = await freePort()
    const gateway = await startChaosGateway(`http://127.0.0.1:${upstreamPort}`)
    closers.push(() => gateway.close())
    const io = capture()
    const code = await runCli(
      [
        'chaos',
        '--target',
        `${gateway.url}/v1/v1`,
        '--protocol',
        'openai-chat',
        '--upstream-port',
        String(upstreamPort),
        '--scenarios',
        'empty,rate-limited',
      ],
      io,
    )
    expect(code).toBe(3)
    const out = io.stdout.join('\n')
    expect(out).toMatch(/^FAIL: 0 ✓, 0 ✗, 2 n\/a; /m)
    expect(out).toMatch(/nothing was judged: the gateway never called the upstream/)
  })

  it('load mode: counts every request and reports attempts and first-token percentiles', async () => {
    const upstreamPort = await freePort()
    const gateway = await startChaosGateway(`http://127.0.0.1:${upstreamPort}`)
    closers.push(() => gateway.close())
    const { code, report } = await chaos([
      '--target',
      `${gateway.url}/v1`,
      '--protocol',
      'openai-chat',
      '--upstream-port',
      String(upstreamPort),
      '--requests',
      '60',
      '--concurrency',
      '20',
      '--fault-rate',
      '0.5',
      '--seed',
      '7',
      '--hang-ms',
      '15000',
    ])
    expect(report.mode).toBe('load')
    expect(report.scenarios).toEqual([])
    expect(report.counts.requests).toBe(60)
    expect(report.counts.silentFailures + report.counts.duplicates + report.counts.hangs).toBe(0)
    expect(code).toBe(0)
    expect(report.counts.answered + report.counts.honestErrors).toBe(60)
    const load = report.load
    expect(load).toMatchObject({
      concurrency: 20,
      faultRate: 0.5,
      seed: 7,
      gatewayMemory: null,
      badExamples: [],
    })
    // Half the requests met a fault first, and the gateway retried most of them.
    expect(load?.attemptsPerRequest.mean).toBeGreaterThan(1.1)
    expect(load?.firstTokenMs.p50).toBeGreaterThan(0)
    expect(load?.firstTokenMs.p99).toBeGreaterThanOrEqual(load?.firstTokenMs.p50 ?? Infinity)
    // Per fault: every request counted once, under the fault it met.
    const byFault = Object.values(load?.byFault ?? {})
    expect(byFault.reduce((sum, fault) => sum + fault.requests, 0)).toBe(60)
    expect(load?.byFault.ok?.requests).toBeGreaterThan(0)
    expect(load?.byFault.ok?.missed).toBe(0)
  })

  it('load mode against the example gateway with each selection its pool accepts: no silent failure, duplicate or hang', async () => {
    const all: KeySelection[] = ['round-robin', 'weighted', 'least-inflight', 'headroom', 'fastest']
    // A selection the pool does not accept yet would only fail the gateway's start.
    const accepted = all.filter((selection) => {
      try {
        createMemoryKeyPool([{ id: 'a', secret: 'sk-a' }], { selection })
        return true
      } catch {
        return false
      }
    })
    expect(accepted).toContain('round-robin')
    for (const selection of accepted) {
      const upstreamPort = await freePort()
      const gateway = await startChaosGateway(
        `http://127.0.0.1:${upstreamPort}`,
        0,
        undefined,
        false,
        selection,
      )
      closers.push(() => gateway.close())
      const { code, report } = await chaos([
        '--target',
        `${gateway.url}/v1`,
        '--protocol',
        'openai-chat',
        '--upstream-port',
        String(upstreamPort),
        '--requests',
        '40',
        '--concurrency',
        '8',
        '--fault-rate',
        '0.4',
      ])
      expect(report.counts, selection).toMatchObject({
        requests: 40,
        silentFailures: 0,
        duplicates: 0,
        hangs: 0,
      })
      expect(code, selection).toBe(0)
    }
  })

  it.runIf(process.platform === 'linux')(
    '--selection round-robin, load mode: the started example gateway is told the selection, and the report says it',
    async () => {
      const port = await freePort()
      const { code, report, io } = await chaos([
        '--target',
        `http://127.0.0.1:${port}/v1`,
        '--protocol',
        'openai-chat',
        '--requests',
        '20',
        '--concurrency',
        '4',
        '--fault-rate',
        '0.4',
        '--selection',
        'round-robin',
        '--gateway',
        `UPSTREAM_URL={upstream} PORT=${port} node --import tsx test/cli/example-gateway.ts`,
      ])
      expect(report.selection).toBe('round-robin')
      expect(io.stderr.join('\n')).toContain('key selection round-robin')
      expect(report.counts).toMatchObject({
        requests: 20,
        silentFailures: 0,
        duplicates: 0,
        hangs: 0,
      })
      expect(code).toBe(0)
    },
    60_000,
  )

  it.runIf(process.platform === 'linux')(
    '--gateway starts the command with {upstream} filled in and stops its process group',
    async () => {
      const port = await freePort()
      const { code, report, io } = await chaos([
        '--target',
        `http://127.0.0.1:${port}/v1`,
        '--protocol',
        'openai-chat',
        '--scenarios',
        'ok,empty',
        '--gateway',
        `UPSTREAM_URL={upstream} PORT=${port} node --import tsx examples/plain-relay.ts`,
      ])
      expect(code).toBe(1)
      expect(report.counts).toMatchObject({ answered: 1, silentFailures: 1 })
      const started =
        /gateway: started pid (\d+): UPSTREAM_URL=http:\/\/127\.0\.0\.1:\d+ PORT=/.exec(
          io.stderr.join('\n'),
        )
      expect(started).not.toBeNull()
      const pid = Number(started?.[1])
      expect(runningInGroup(pid)).toEqual([])
    },
  )
})
