// The runtimes only the runtimes step needs (Bun and Deno for scripts/runtimes.sh, workerd for
// scripts/workerd-smoke.mjs) are not devDependencies: each is a 90-160 MB binary that most
// contributors never run. They are fetched here on first use, at the exact versions below, from
// their npm packages, into .runtimes/<name>/ (gitignored, outside node_modules/, so `npm ci`
// neither installs nor deletes them) and reused after; a changed pin installs again.
//   node scripts/runtime-bin.mjs bun            prints the path of the bun binary
//   import { runtimeBin } from './runtime-bin.mjs'

import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// npm package (and binary) name → exact version. Bump here, nowhere else.
const pins = {
  bun: '1.4.5',
  deno: '2.9.6',
  workerd: '1.20261117.1',
}

const root = fileURLToPath(new URL('..', import.meta.url))

function read(file) {
  try {
    return readFileSync(file, 'utf8').trim()
  } catch {
    return undefined
  }
}

/** The path of the runtime's binary, installing its pinned npm package first when needed. */
export function runtimeBin(name) {
  const version = Object.hasOwn(pins, name) ? pins[name] : undefined
  if (version === undefined) {
    throw new Error(`unknown runtime ${name}: one of ${Object.keys(pins).join(', ')}`)
  }
  const spec = `${name}@${version}`
  const dir = join(root, '.runtimes', name)
  const bin = join(dir, 'node_modules', '.bin', name)
  // Written only after a whole install, so an interrupted one is redone.
  const marker = join(dir, 'installed')
  if (read(marker) === spec && existsSync(bin)) return bin

  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  // bun, deno and workerd put their binary in place from a postinstall script: allowed by name
  // and version, so npm runs it without a warning (npm versions before allowScripts run it anyway).
  const manifest = {
    private: true,
    dependencies: { [name]: version },
    allowScripts: { [spec]: true },
  }
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`)
  process.stderr.write(`installing ${spec} into .runtimes/${name}/\n`)
  execFileSync(
    'npm',
    [
      'install',
      '--prefix',
      dir,
      '--no-package-lock',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
    ],
    { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] },
  )
  if (!existsSync(bin)) throw new Error(`npm install ${spec} left no ${bin}`)
  writeFileSync(marker, `${spec}\n`)
  return bin
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    console.log(runtimeBin(process.argv[2] ?? ''))
  } catch (error) {
    console.error(`runtime-bin: ${error?.message ?? error}`)
    process.exit(1)
  }
}
