import { fileURLToPath } from 'node:url'
import { defineConfig } from 'vitest/config'

export default defineConfig({
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
