/**
 * docs/guarantees.md names, for every promise, the test that checks it: each named test must
 * exist under that exact name in the file linked, so the page cannot drift from the suite.
 */

import { existsSync, readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { root } from './marked-snippets.js'

const page = readFileSync(`${root}docs/guarantees.md`, 'utf8')
const rows = page.split('\n').filter((line) => /^\| \d+ \|/.test(line))

describe('docs/guarantees.md', () => {
  it('lists the 23 promises of the design, then the later ones (24-30: key pools, client bytes, unknown content, requests that never blame a key, no unbounded wait, options checked once), in order, none left to fill in', () => {
    expect(rows.map((row) => Number(/^\| (\d+) \|/.exec(row)?.[1]))).toEqual(
      Array.from({ length: 30 }, (_, index) => index + 1),
    )
    expect(page).not.toMatch(/FINISH-|CYCLE-/)
  })

  it('every test it names exists under that name in the linked file', () => {
    const named = rows.flatMap((row) =>
      [...row.matchAll(/\[`([^`]+)`\]\(\.\.\/[^)]+\): "([^"]+)"/g)].map((m) => ({
        file: m[1] ?? '',
        name: m[2] ?? '',
      })),
    )
    expect(named.length).toBeGreaterThanOrEqual(15)
    for (const { file, name } of named) {
      expect(existsSync(`${root}${file}`), file).toBe(true)
      expect(readFileSync(`${root}${file}`, 'utf8'), `${file}: ${name}`).toContain(name)
    }
  })

  it('every file it links exists', () => {
    for (const [, path] of page.matchAll(/\]\(\.\.\/([^)#]+)\)/g))
      expect(existsSync(`${root}${path}`), path).toBe(true)
  })
})
