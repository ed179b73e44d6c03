/**
 * User-space instructions per request in an HTTP relay's process, counted by valgrind's
 * callgrind: repeatable on a machine shared with other work, where CPU time is not. Builds
 * bench/http-proxy.ts as `npm run bench` does (and, with `--base <commit>`, the same file from
 * that commit), serves one-frame answers from a local upstream (its head, then the frame, then
 * the end), and runs each relay under callgrind: 400 warm-up requests, counters zeroed, then
 * `--requests` more, 8 at a time; each relay `--pairs` times, the base's (with `--base`) first.
 * Needs `valgrind` (and its `callgrind_control`) on the PATH.
 *
 *   node scripts/callgrind-http.mjs [--base <commit>] [--requests 300] [--pairs 2] [raw,gateway]
 */

import { execFileSync, fork } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { Agent, createServer, request } from 'node:http'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { build } from 'esbuild'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const { values, positionals } = parseArgs({
  options: {
    base: { type: 'string' },
    requests: { type: 'string', default: '300' },
    pairs: { type: 'string', default: '2' },
  },
  allowPositionals: true,
})
const requests = Number(values.requests)
const modes = (positionals[0] ?? 'raw,gateway').split(',')
const work = mkdtempSync(join(tmpdir(), 'callgrind-http-'))

/** bench/http-proxy.ts of the tree at `dir`, bundled inside it (its node_modules resolve). */
async function bundle(dir, name) {
  const outfile = join(dir, 'node_modules', '.cache', `callgrind-http-${name}.mjs`)
  await build({
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    packages: 'external',
    tsconfig: join(dir, 'tsconfig.json'),
    logLevel: 'warning',
    entryPoints: [join(dir, 'bench', 'http-proxy.ts')],
    outfile,
    define: { 'import.meta.url': '"bundled:http-proxy"' },
  })
  return outfile
}

const builds = [['this tree', await bundle(root, 'current')]]
if (values.base !== undefined) {
  const tree = join(work, 'base')
  mkdirSync(join(tree, 'node_modules'), { recursive: true })
  execFileSync('bash', ['-c', `git -C '${root}' archive '${values.base}' | tar -x -C '${tree}'`])
  rmSync(join(tree, 'node_modules'), { recursive: true })
  symlinkSync(join(root, 'node_modules'), join(tree, 'node_modules'))
  builds.unshift([values.base, await bundle(tree, 'base')])
}

const frame = Buffer.from(
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"logprobs":null,"finish_reason":"stop"}]}\n\n',
)
const upstream = createServer((req, res) => {
  req.resume()
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream' }).flushHeaders()
    setImmediate(() => {
      res.write(frame)
      setImmediate(() => res.end())
    })
  })
})
await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve))
const upstreamUrl = `http://127.0.0.1:${upstream.address().port}`
const body = JSON.stringify({
  model: 'bench',
  stream: true,
  messages: [{ role: 'user', content: 'hi' }],
})
const agent = new Agent({ keepAlive: true })

function load(url, count) {
  const one = () =>
    new Promise((resolve, reject) => {
      const headers = {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      }
      const req = request(
        `${url}/v1/chat/completions`,
        { method: 'POST', agent, headers },
        (res) => {
          res.resume()
          res.on('end', resolve)
        },
      )
      req.on('error', reject)
      req.end(body)
    })
  let next = 0
  const worker = async () => {
    while (next++ < count) await one()
  }
  return Promise.all(Array.from({ length: 8 }, worker))
}

/** Instructions per request of one relay process under callgrind. */
async function measure(file, mode) {
  const child = fork(file, [mode, upstreamUrl], {
    execPath: 'valgrind',
    execArgv: [
      '--tool=callgrind',
      `--callgrind-out-file=${join(work, 'cg.%p')}`,
      '--dump-instr=no',
      process.execPath,
    ],
    stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
  })
  const url = await new Promise((resolve) =>
    child.once('message', (message) => resolve(message.url)),
  )
  await load(url, 400)
  execFileSync('callgrind_control', ['--zero', String(child.pid)], { stdio: 'ignore' })
  await load(url, requests)
  execFileSync('callgrind_control', ['--dump=measured', String(child.pid)], { stdio: 'ignore' })
  const summary = /^summary: (\d+)$/m.exec(readFileSync(join(work, `cg.${child.pid}.1`), 'utf8'))
  child.send('exit')
  await new Promise((resolve) => child.once('exit', resolve))
  return Number(summary?.[1]) / requests
}

console.log(`| relay | build | instructions per request (${requests} requests, each run) |`)
console.log('| --- | --- | --- |')
try {
  for (const mode of modes) {
    for (const [name, file] of builds) {
      const runs = []
      for (let pair = 0; pair < Number(values.pairs); pair++) runs.push(await measure(file, mode))
      console.log(
        `| ${mode} | ${name} | ${runs.map((n) => `${(n / 1e6).toFixed(2)} M`).join(', ')} |`,
      )
    }
  }
} finally {
  agent.destroy()
  upstream.close()
  rmSync(work, { recursive: true, force: true })
}
