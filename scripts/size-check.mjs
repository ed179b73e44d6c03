// Bundle size budget of the root entry, as an app bundler would ship it: dist/index.js with
// everything it imports bundled in (p-retry and its dependency), minified, gzipped.
// Run after `npm run build`: node scripts/size-check.mjs (npm run size)

import { builtinModules } from 'node:module'
import { fileURLToPath } from 'node:url'
import { gzipSync } from 'node:zlib'
import { build } from 'esbuild'

/** Bytes, gzipped: 24,343 B when set, plus about 15 %. Raise it on purpose, in the change that needs it. */
const budgetGzipBytes = 28_000

const entry = fileURLToPath(new URL('../dist/index.js', import.meta.url))
const result = await build({
  entryPoints: [entry],
  bundle: true,
  minify: true,
  format: 'esm',
  platform: 'neutral',
  target: 'es2022',
  mainFields: ['module', 'main'],
  external: [...builtinModules, 'node:*'],
  write: false,
  metafile: true,
  logLevel: 'warning',
})
const code = result.outputFiles[0]?.contents
if (code === undefined) throw new Error('esbuild produced no output')
const gzipped = gzipSync(code, { level: 9 }).length
const inputs = Object.keys(result.metafile.inputs)
const dependencies = [
  ...new Set(inputs.flatMap((path) => path.match(/node_modules\/((?:@[^/]+\/)?[^/]+)/)?.[1] ?? [])),
]
const kib = (n) => `${(n / 1024).toFixed(1)} KiB`
console.log(
  `stream-boundary (root entry, minified, dependencies bundled: ${dependencies.join(', ') || 'none'}): ` +
    `${kib(code.length)} min, ${kib(gzipped)} gzip (${gzipped} B; budget ${budgetGzipBytes} B)`,
)
if (gzipped > budgetGzipBytes) {
  console.error(`over budget by ${gzipped - budgetGzipBytes} B`)
  process.exit(1)
}
