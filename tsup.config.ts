import { defineConfig } from 'tsup'

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    node: 'src/node.ts',
    redis: 'src/redis.ts',
    testing: 'src/testing/index.ts',
    cli: 'src/cli/bin.ts',
  },
  format: ['esm', 'cjs'],
  dts: true,
  target: 'es2022',
  platform: 'neutral',
  sourcemap: true,
  clean: true,
  splitting: false,
  // Keep `node:http` as written: Deno and Workers resolve builtins by their `node:` names.
  removeNodeProtocol: false,
  treeshake: true,
  external: ['fast-check', 'p-retry', 'ioredis', 'stream-boundary/node', /^node:/],
})
