/**
 * The API reference names each module by the path a user imports it from: every TypeDoc
 * entry point opens with `@module <import path>`, and every import path of package.json's
 * `exports` (but `./package.json`) is an entry point.
 */

import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const root = fileURLToPath(new URL('../../', import.meta.url))
const read = (path: string) => readFileSync(`${root}${path}`, 'utf8')

/** typedoc.json is JSON with comments. */
const typedoc = JSON.parse(read('typedoc.json').replace(/^\s*\/\/.*$/gm, '')) as {
  entryPoints: string[]
}
const packageJson = JSON.parse(read('package.json')) as { exports: Record<string, unknown> }

/** Where tsup builds each import path from (tsup.config.ts `entry`). */
const sources: Record<string, string> = {
  'stream-boundary': 'src/index.ts',
  'stream-boundary/advanced': 'src/advanced.ts',
  'stream-boundary/node': 'src/node.ts',
  'stream-boundary/otel': 'src/otel/index.ts',
  'stream-boundary/redis': 'src/redis.ts',
  'stream-boundary/testing': 'src/testing/index.ts',
}

describe('API reference module titles', () => {
  it('every import path of the package is a TypeDoc entry point', () => {
    const paths = Object.keys(packageJson.exports)
      .filter((path) => path !== './package.json')
      .map((path) => (path === '.' ? 'stream-boundary' : `stream-boundary/${path.slice(2)}`))
    expect(paths.sort()).toEqual(Object.keys(sources).sort())
    expect([...typedoc.entryPoints].sort()).toEqual(Object.values(sources).sort())
  })

  it.each(Object.entries(sources))('%s is titled by its import path', (path, source) => {
    expect(/@module (\S+)/.exec(read(source))?.[1]).toBe(path)
  })
})
