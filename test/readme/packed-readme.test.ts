/**
 * The README on the registry page: npm shows the README of the tarball, beside no docs/. Packed
 * as `prepack` packs it (scripts/readme-for-registry.mjs), every link resolves: into the
 * tarball, or into this repository by an absolute URL whose path exists here
 * (scripts/check-packed-readme.mjs). Packed in a copy, so the repository's README is never
 * rewritten while other tests read it.
 */

import { execFileSync, spawnSync } from 'node:child_process'
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'

const root = fileURLToPath(new URL('../../', import.meta.url))
const work = mkdtempSync(join(tmpdir(), 'sb-packed-readme-'))

afterAll(() => rmSync(work, { recursive: true, force: true }))

/** Packs a copy of the package's manifest, README and CHANGELOG; `rewrite` as prepack does. */
function pack(name: string, rewrite: boolean): string {
  const dir = join(work, name)
  execFileSync('mkdir', ['-p', dir])
  for (const file of ['package.json', 'README.md', 'CHANGELOG.md'])
    copyFileSync(join(root, file), join(dir, file))
  if (rewrite)
    execFileSync(process.execPath, [join(root, 'scripts/readme-for-registry.mjs'), 'write', dir])
  execFileSync('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir], {
    cwd: dir,
  })
  const tarball = readdirSync(dir).find((file) => file.endsWith('.tgz'))
  if (tarball === undefined) throw new Error(`npm pack wrote no tarball in ${dir}`)
  return join(dir, tarball)
}

function check(tarball: string): { status: number | null; output: string } {
  const run = spawnSync(
    process.execPath,
    [join(root, 'scripts/check-packed-readme.mjs'), tarball],
    {
      encoding: 'utf8',
    },
  )
  return { status: run.status, output: `${run.stdout}${run.stderr}` }
}

describe('the README on the registry page', () => {
  it('packed as prepack packs it, every README link resolves and the manifest names the repository', () => {
    const { status, output } = check(pack('rewritten', true))
    expect(output).toMatch(/packed README: all \d+ links resolve/)
    expect(status).toBe(0)
  })

  it('packed as it is in the repository, its docs/ links resolve to nothing (what the check catches)', () => {
    const { status, output } = check(pack('as-is', false))
    expect(status).toBe(1)
    expect(output).toContain('README link docs/retries.md: no docs/retries.md in the tarball')
  })

  it('prepack rewrites the README as its last step and postpack restores it', () => {
    const { scripts } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>
    }
    expect(scripts.prepack).toMatch(/&& node scripts\/readme-for-registry\.mjs write$/)
    expect(scripts.postpack).toBe('node scripts/readme-for-registry.mjs restore')
  })

  it("the repository's README is the source copy: relative links, no leftover of a pack", () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8')
    expect(readme).not.toMatch(
      /\]\(https:\/\/github\.com\/stream-boundary\/stream-boundary\/(blob|tree)\/main\//,
    )
    expect(readdirSync(root)).not.toContain('.readme-source.md')
  })
})
