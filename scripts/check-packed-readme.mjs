// Every link of the README inside a packed tarball works on the registry page: a `#anchor` is a
// heading of the README, a relative link names a file in the tarball, and a link into this
// repository (package.json's `repository`, `…/blob/main/<path>` or `…/tree/main/<path>`) names
// a path of this checkout (with its heading, for an anchor). package.json has `repository`,
// `homepage` and `bugs`, the registry page's own links. Run by scripts/check-package.sh and
// test/readme/packed-readme.test.ts.
//
// Usage: node scripts/check-packed-readme.mjs <tarball>

import { execFileSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const [tarball] = process.argv.slice(2)
if (tarball === undefined) {
  console.error('usage: node scripts/check-packed-readme.mjs <tarball>')
  process.exit(2)
}

/** GitHub's anchors for a page's headings (github-slugger), and its explicit `<a id>`s. */
function anchors(markdown) {
  const seen = new Map()
  const result = new Set()
  const text = markdown.replace(/^```[\s\S]*?^```/gm, '')
  for (const [, heading] of text.matchAll(/^#{1,6} +(.+?) *#* *$/gm)) {
    const base = heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}_\- ]/gu, '')
      .replace(/ /g, '-')
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    result.add(count === 0 ? base : `${base}-${count}`)
  }
  for (const [, id] of text.matchAll(/<a id="([^"]+)"><\/a>/g)) result.add(id)
  return result
}

/** Why `file#anchor` does not resolve, or `undefined` when it does. */
function missing(file, anchor, shown) {
  if (!existsSync(file)) return `no ${shown}`
  if (anchor === undefined || statSync(file).isDirectory()) return undefined
  return anchors(readFileSync(file, 'utf8')).has(anchor)
    ? undefined
    : `no heading #${anchor} in ${shown}`
}

const unpacked = mkdtempSync(join(tmpdir(), 'packed-readme-'))
try {
  execFileSync('tar', ['-xzf', tarball, '-C', unpacked])
  const pkg = join(unpacked, 'package')
  const manifest = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8'))
  const problems = []
  for (const field of ['repository', 'homepage', 'bugs']) {
    if (manifest[field] === undefined) problems.push(`package.json has no ${field}`)
  }
  const repoUrl = (manifest.repository?.url ?? '').replace(/^git\+/, '').replace(/\.git$/, '')
  const readme = readFileSync(join(pkg, 'README.md'), 'utf8')
  const prose = readme.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '')
  let links = 0
  for (const [, target] of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
    links++
    const [path = '', anchor] = target.split('#')
    let why
    if (repoUrl !== '' && target.startsWith(`${repoUrl}/`)) {
      const inRepo = path.slice(repoUrl.length + 1)
      const file = inRepo.replace(/^(blob|tree)\/main\//, '')
      why =
        file === inRepo
          ? 'not a blob/main/ or tree/main/ path'
          : missing(join(root, file), anchor, `${file} in the repository`)
    } else if (/^[a-z][a-z0-9+.-]*:/i.test(target)) {
      continue // Another site: not ours to check offline.
    } else {
      const file = path === '' ? join(pkg, 'README.md') : join(pkg, path)
      why = missing(file, anchor, `${path || 'README.md'} in the tarball`)
    }
    if (why !== undefined) problems.push(`README link ${target}: ${why}`)
  }
  if (problems.length > 0) {
    console.error(
      `the packed README does not work on the registry page:\n  ${problems.join('\n  ')}`,
    )
    process.exit(1)
  }
  console.log(`packed README: all ${links} links resolve; repository, homepage and bugs are set`)
} finally {
  rmSync(unpacked, { recursive: true, force: true })
}
