import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { defineConfig } from 'vitest/config'

const packageVersion: string = JSON.parse(readFileSync('package.json', 'utf8')).version

export default defineConfig({
  // As tsup.config.ts defines it for the build: the OTel instrumentation scope's version.
  define: { __STREAM_BOUNDARY_VERSION__: JSON.stringify(packageVersion) },
  resolve: {
    alias: [
      {
        find: /^stream-boundary\/advanced$/,
        replacement: fileURLToPath(new URL('./src/advanced.ts', import.meta.url)),
      },
      {
        find: /^stream-boundary\/node$/,
        replacement: fileURLToPath(new URL('./src/node.ts', import.meta.url)),
      },
      {
        find: /^stream-boundary\/otel$/,
        replacement: fileURLToPath(new URL('./src/otel/index.ts', import.meta.url)),
      },
      {
        find: /^stream-boundary\/redis$/,
        replacement: fileURLToPath(new URL('./src/redis.ts', import.meta.url)),
      },
      {
        find: /^stream-boundary\/testing$/,
        replacement: fileURLToPath(new URL('./src/testing/index.ts', import.meta.url)),
      },
      {
        find: /^stream-boundary$/,
        replacement: fileURLToPath(new URL('./src/index.ts', import.meta.url)),
      },
    ],
  },
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'threads',
  },
})
