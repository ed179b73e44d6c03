/**
 * `npm run bench`: builds the benchmarks the way the package ships (esbuild, as tsup does: no
 * `keepNames`, the library bundled from src/ through the tsconfig paths, dependencies
 * external) into node_modules/.cache/stream-boundary-bench/, then runs them with
 * `--expose-gc`. Running the TypeScript through tsx instead would measure tsx's `keepNames`
 * helper on every closure made per request, which the published build does not have.
 */

import { spawnSync } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const out = join(root, 'node_modules', '.cache', 'stream-boundary-bench')
mkdirSync(out, { recursive: true })

const common = {
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  packages: 'external',
  tsconfig: join(root, 'tsconfig.json'),
  logLevel: 'warning',
}
await build({
  ...common,
  entryPoints: [join(root, 'bench', 'run.ts')],
  outfile: join(out, 'run.mjs'),
})
// The memory benchmark runs in a fresh process of its own.
await build({
  ...common,
  entryPoints: [join(root, 'bench', 'memory-child.ts')],
  outfile: join(out, 'memory-child.mjs'),
})
// The relay child imports the example gateway, whose "run me" check compares import.meta.url
// with the entry: in a bundle they are equal, so it is given a URL of its own.
await build({
  ...common,
  entryPoints: [join(root, 'bench', 'http-proxy.ts')],
  outfile: join(out, 'http-proxy.mjs'),
  define: { 'import.meta.url': '"bundled:http-proxy"' },
})
// The OpenTelemetry benchmark's gateways import the example gateway too (bench/otel.ts).
await build({
  ...common,
  entryPoints: [join(root, 'bench', 'otel-gateway.ts')],
  outfile: join(out, 'otel-gateway.mjs'),
  define: { 'import.meta.url': '"bundled:otel-gateway"' },
})
// The recovery benchmark imports the example gateway too, and runs in a process of its own.
await build({
  ...common,
  entryPoints: [join(root, 'bench', 'recovery.ts')],
  outfile: join(out, 'recovery.mjs'),
  define: { 'import.meta.url': '"bundled:recovery"' },
})

// The runtimes benchmark serves the raw pipe and the example gateway each from a bundle of its
// own (the gateway's run by Node and by Bun), so neither carries the other's code.
await build({
  ...common,
  entryPoints: [join(root, 'bench', 'served-raw.ts')],
  outfile: join(out, 'served-raw.mjs'),
})
await build({
  ...common,
  entryPoints: [join(root, 'bench', 'served-gateway.ts')],
  outfile: join(out, 'served-gateway.mjs'),
  define: { 'import.meta.url': '"bundled:served-gateway"' },
})

// The fleet benchmarks' replicas run in processes of their own (bench/fleet-replicas.ts).
await build({
  ...common,
  entryPoints: [join(root, 'bench', 'fleet-replica.ts')],
  outfile: join(out, 'fleet-replica.mjs'),
})

// `npm run bench -- --only fleet-scale,fleet-replicas` picks parts (as BENCH_ONLY does);
// `--quick` runs tiny sizes (as BENCH_QUICK=1 does).
const env = { ...process.env, BENCH_RESULTS_DIR: join(root, 'bench', 'results') }
const args = process.argv.slice(2)
for (const [i, arg] of args.entries()) {
  if (arg === '--only' && args[i + 1] !== undefined) env.BENCH_ONLY = args[i + 1]
  else if (arg.startsWith('--only=')) env.BENCH_ONLY = arg.slice('--only='.length)
  else if (arg === '--quick') env.BENCH_QUICK = '1'
}
const result = spawnSync(process.execPath, ['--expose-gc', join(out, 'run.mjs')], {
  stdio: 'inherit',
  env,
})
process.exit(result.status ?? 1)
