/**
 * A chaos run whose gateway never called the upstream (exit 3) names the likely cause: with
 * `--gateway`, the variable that got `{upstream}` is not the one the gateway reads.
 */

import { createServer } from 'node:net'
import { describe, expect, it } from 'vitest'
import { type CliIo, runCli } from '../../src/cli/main.js'
import { nothingJudgedCause } from '../../src/cli/nothing-judged.js'
import { createFaultyUpstream } from '../../src/testing/faulty-upstream.js'

async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return port
}

describe('chaos: nothing judged', () => {
  it.runIf(process.platform === 'linux')(
    'a --gateway whose upstream variable never got {upstream} exits 3 naming the variable, not only the target path',
    async () => {
      // The gateway reads UPSTREAM_URL; the command sets UPSTREAM_OPENAI_URL (the example
      // gateway's name) to {upstream}, so the gateway calls another upstream (a decoy here).
      const decoy = createFaultyUpstream({ scenarios: { ok: ['ok'], empty: ['ok'] } })
      const decoyUrl = await decoy.listen()
      const port = await freePort()
      const stdout: string[] = []
      const io: CliIo = { out: (text) => stdout.push(text), err: () => {} }
      try {
        const code = await runCli(
          [
            'chaos',
            '--target',
            `http://127.0.0.1:${port}/v1`,
            '--protocol',
            'openai-chat',
            '--scenarios',
            'ok,empty',
            '--gateway',
            `UPSTREAM_OPENAI_URL={upstream}/v1 UPSTREAM_URL=${decoyUrl} PORT=${port} node --import tsx test/cli/example-gateway.ts`,
          ],
          io,
        )
        expect(code).toBe(3)
        const out = stdout.join('\n')
        expect(out).toMatch(/nothing was judged: the gateway never called the upstream\./)
        expect(out).toMatch(
          /Most likely the gateway's upstream variable never got \{upstream\}: the command sets UPSTREAM_OPENAI_URL;/,
        )
        expect(decoy.requests.length).toBeGreaterThan(0)
      } finally {
        await decoy.close()
      }
    },
    60_000,
  )

  it('names the cause for each way of running the gateway', () => {
    expect(nothingJudgedCause({ gateway: undefined }, 'http://127.0.0.1:9')).toMatch(
      /Check that the gateway's upstream URL is the faulty upstream's \(http:\/\/127\.0\.0\.1:9; --upstream-port fixes its port\)/,
    )
    expect(nothingJudgedCause({ gateway: 'PORT=1 node gw.js' }, 'u')).toMatch(
      /The --gateway command has no \{upstream\}/,
    )
    expect(
      nothingJudgedCause({ gateway: `A="{upstream}/v1" B={upstream} node gw.js` }, 'u'),
    ).toMatch(/the command sets A, B; check that the gateway reads one of them/)
  })
})
