import { readFileSync } from 'node:fs'
import { relative, resolve, sep } from 'node:path'
import { defineConfig, type Options } from 'tsup'

type EsbuildPlugin = NonNullable<Options['esbuildPlugins']>[number]

const src = resolve('src')
const packageVersion: string = JSON.parse(readFileSync('package.json', 'utf8')).version

/**
 * Code that belongs to a subpath entry ("./node", "./otel", "./redis", "./testing", the CLI); everything
 * else under src/ is the core, which only the root entry bundles.
 */
function isSubpathCode(file: string): boolean {
  const path = relative(src, file).split(sep).join('/')
  return (
    path === 'node.ts' ||
    path.startsWith('node/') ||
    path.startsWith('otel/') ||
    path === 'redis.ts' ||
    path.startsWith('redis/') ||
    path.startsWith('testing/') ||
    path.startsWith('cli/')
  )
}

/**
 * Stateless helpers a subpath entry may carry its own copy of: no module state, and no class
 * anything checks with `instanceof`, so two copies cannot disagree. Everything else from the
 * core is imported from the root.
 */
const copyable = new Set([
  'options.ts',
  'call-safely.ts',
  'key-pool/outcomes.ts',
  'stop.ts',
  'guard-methods.ts',
  'protocols/bytes.ts',
  'sse/index-of.ts',
  'sse/sources.ts',
  'protocols/sanitize.ts',
  'retry/request/correlation.ts',
  // plainHead is a registered symbol (Symbol.for): every copy is the same symbol.
  'commit/head.ts',
  // Selection arithmetic and its constants, shared by the memory and Redis pools.
  'key-pool/selection.ts',
  'retry/request/ready-attempt.ts',
  'retry/request/client-request.ts',
  // The readers' refusals: plain values and their constructors.
  'retry/request/client-refusal.ts',
  // The node:http answer: used by stream-boundary/node alone; the core reads it as a Response.
  'sse/plain-response.ts',
])

/**
 * One copy of the core for every entry: a subpath entry's import of a core module becomes an
 * import of the package root by self-reference (`stream-boundary`), kept external. Without it
 * each entry bundles its own `StreamBoundaryError`, adapters and state, and `instanceof`
 * fails across entries. A name imported this way must be a root export
 * (`node scripts/check-entries.mjs` checks it after the build).
 */
const coreFromRoot: EsbuildPlugin = {
  name: 'core-from-root',
  setup(build) {
    build.onResolve({ filter: /^\.\.?\// }, (args) => {
      if (args.importer === '' || !isSubpathCode(args.importer)) return undefined
      const target = resolve(args.resolveDir, args.path.replace(/\.js$/, '.ts'))
      const path = relative(src, target).split(sep).join('/')
      if (path.startsWith('..') || isSubpathCode(target) || copyable.has(path)) return undefined
      if (path === 'advanced.ts') return { path: 'stream-boundary/advanced', external: true }
      return { path: 'stream-boundary', external: true }
    })
  },
}

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    advanced: 'src/advanced.ts',
    node: 'src/node.ts',
    otel: 'src/otel/index.ts',
    redis: 'src/redis.ts',
    testing: 'src/testing/index.ts',
    cli: 'src/cli/bin.ts',
  },
  format: ['esm', 'cjs'],
  dts: true,
  target: 'es2022',
  platform: 'neutral',
  // Maps without the sources embedded: stack traces (`node --enable-source-maps`) still name
  // src/ files and lines, at a fraction of the size (docs/package.md has the figures).
  sourcemap: true,
  esbuildOptions(options) {
    options.sourcesContent = false
  },
  clean: true,
  // CJS output cannot split; the entries share the core through `coreFromRoot` instead.
  splitting: false,
  // Keep `node:http` as written: Deno and Workers resolve builtins by their `node:` names.
  removeNodeProtocol: false,
  treeshake: true,
  external: [
    'fast-check',
    'ioredis',
    '@opentelemetry/api',
    'stream-boundary',
    'stream-boundary/advanced',
    /^node:/,
  ],
  esbuildPlugins: [coreFromRoot],
  // The package's version as a constant (the OTel instrumentation scope's version), so no
  // entry reads package.json at run time.
  define: { __STREAM_BOUNDARY_VERSION__: JSON.stringify(packageVersion) },
})
