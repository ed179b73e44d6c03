/**
 * `npm run bench`: every benchmark, side by side in one run, written to
 * bench/results/latest.json and printed as the tables the README shows.
 * `BENCH_QUICK=1` runs tiny sizes (a smoke run).
 */

import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { benchFramePath } from './frame-path.js'

const quick = process.env.BENCH_QUICK === '1'
const here = dirname(fileURLToPath(import.meta.url))

const fmt = (value: number, digits = 2) => value.toFixed(digits)

async function main() {
  const started = new Date().toISOString()
  console.log(`stream-boundary benchmarks (${quick ? 'quick' : 'full'}) on Node ${process.version}`)
  const framePath = await benchFramePath(
    quick ? { frames: 500, rounds: 3 } : { frames: 20_000, rounds: 15 },
  )
  for (const group of framePath) {
    console.log(
      `\n### Frame path: ${group.input}, ${group.chunking} (${group.frames} frames, ${group.bytes} bytes)\n`,
    )
    console.log('| contender | µs/frame | MB/s | × floor |')
    console.log('| --- | ---: | ---: | ---: |')
    for (const r of group.results) {
      console.log(
        `| ${r.name} | ${fmt(r.usPerFrame, 3)} | ${fmt(r.megabytesPerSecond, 0)} | ${fmt(r.ratioToFloor)} |`,
      )
    }
  }
  const results = { started, node: process.version, quick, framePath }
  const dir = join(here, 'results')
  mkdirSync(dir, { recursive: true })
  const file = join(dir, quick ? 'quick.local.json' : 'latest.json')
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`)
  console.log(`\nwritten to ${file}`)
}

await main()
