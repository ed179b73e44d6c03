/**
 * Every relative link of the README and of docs/*.md resolves: the file exists and, for a
 * `#anchor`, the target page has a heading with that GitHub anchor (or an `<a id>` of it).
 */

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const root = fileURLToPath(new URL('../../', import.meta.url))
const pages = [
  'README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
]

/** The text outside fenced code blocks and inline code, where links are links. */
function prose(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '')
}

/** GitHub's anchors for a page's headings (github-slugger: lower case, punctuation dropped). */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>()
  const result = new Set<string>()
  const text = markdown.replace(/^```[\s\S]*?^```/gm, '')
  for (const [, heading] of text.matchAll(/^#{1,6} +(.+?) *#* *$/gm)) {
    const base = (heading ?? '')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}_\- ]/gu, '')
      .replace(/ /g, '-')
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    result.add(count === 0 ? base : `${base}-${count}`)
  }
  // Explicit anchors (`<a id="g20"></a>`), as in docs/guarantees.md's table.
  for (const [, id] of text.matchAll(/<a id="([^"]+)"><\/a>/g)) result.add(id ?? '')
  return result
}

/** Broken links of one page, as `page: target (why)`. */
function brokenLinks(page: string): string[] {
  const markdown = readFileSync(join(root, page), 'utf8')
  const broken: string[] = []
  for (const [, target] of prose(markdown).matchAll(/\]\(([^)\s]+)\)/g)) {
    if (target === undefined || /^[a-z]+:/i.test(target)) continue
    const [path = '', anchor] = target.split('#')
    const file = path === '' ? join(root, page) : join(root, dirname(page), path)
    if (!existsSync(file)) {
      broken.push(`${page}: ${target} (no ${relative(root, file)})`)
      continue
    }
    if (anchor === undefined || statSync(file).isDirectory()) continue
    if (!anchors(readFileSync(file, 'utf8')).has(anchor)) {
      broken.push(`${page}: ${target} (no heading #${anchor} in ${relative(root, file)})`)
    }
  }
  return broken
}

describe('README and docs links', () => {
  it('finds the pages and their links', () => {
    expect(pages).toContain('docs/retries.md')
    expect(anchors('## 1. A gateway route: `relay`\n## Hooks\n## Hooks')).toEqual(
      new Set(['1-a-gateway-route-relay', 'hooks', 'hooks-1']),
    )
  })

  it.each(pages)('every relative link of %s resolves', (page) => {
    expect(brokenLinks(page)).toEqual([])
  })
})
