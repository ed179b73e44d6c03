// The README as the npm registry page shows it. The repository's README links docs/ and other
// pages that the package does not ship, by relative paths that resolve on GitHub and in a
// clone; on the registry page they would resolve to nothing. `write` (the `prepack` script, the
// last step before npm packs the files) rewrites every relative link of README.md into an
// absolute link to the repository, keeping the source copy in .readme-source.md;
// `restore` (the `postpack` script) puts the source back. A `write` that finds a source copy
// left by a pack that failed restores it first, so the rewrite never runs on its own output.
//
// Usage: node scripts/readme-for-registry.mjs write|restore [package directory]

import { existsSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const [mode, dir = fileURLToPath(new URL('..', import.meta.url))] = process.argv.slice(2)
const root = resolve(dir)
// Whether a link names a folder is read in this checkout (the package directory may be a copy).
const checkout = fileURLToPath(new URL('..', import.meta.url))
const readme = join(root, 'README.md')
const source = join(root, '.readme-source.md')

/** The repository's web address, from package.json's `repository` (`git+https://…git`). */
function repositoryOf() {
  const { repository } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
  const url = typeof repository === 'string' ? repository : repository?.url
  if (typeof url !== 'string') throw new Error('package.json has no repository.url')
  return url.replace(/^git\+/, '').replace(/\.git$/, '')
}

/** Every relative link target outside code, made absolute: `blob/main/…`, `tree/main/…` for a folder. */
function absoluteLinks(markdown, repository) {
  // Fenced blocks and inline code (the odd parts of the split) are kept as they are.
  return markdown
    .split(/(^```[\s\S]*?^```|`[^`\n]*`)/m)
    .map((part, index) =>
      index % 2 === 1
        ? part
        : part.replace(/\]\(([^)\s]+)\)/g, (link, target) => {
            if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('#')) return link
            const [path = ''] = target.split('#')
            const file = join(checkout, path)
            const kind = existsSync(file) && statSync(file).isDirectory() ? 'tree' : 'blob'
            return `](${repository}/${kind}/main/${target.replace(/^\.\//, '')})`
          }),
    )
    .join('')
}

if (mode === 'write') {
  if (existsSync(source)) renameSync(source, readme)
  const markdown = readFileSync(readme, 'utf8')
  writeFileSync(source, markdown)
  writeFileSync(readme, absoluteLinks(markdown, repositoryOf()))
  console.log('README.md: relative links made absolute for the registry page (postpack restores)')
} else if (mode === 'restore') {
  if (existsSync(source)) renameSync(source, readme)
} else {
  console.error('usage: node scripts/readme-for-registry.mjs write|restore [package directory]')
  process.exit(2)
}
