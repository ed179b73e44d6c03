// What only some steps need is not a devDependency, so a contributor's `npm install` stays
// light (~200 MB): the runtimes of the runtimes step (Bun and Deno for scripts/runtimes.sh,
// workerd for scripts/workerd-smoke.mjs; 90-160 MB binaries each) and the checking tools
// (Biome for lint and format, 97 MB; TypeDoc for the API docs; knip; publint and
// @arethetypeswrong/cli for the package check). Each is fetched on first use, at the exact
// versions below, from its npm package, into .runtimes/<name>/ (gitignored, outside
// node_modules/, so `npm ci` neither installs nor deletes it) and reused after; a changed pin
// installs again.
//   node scripts/runtime-bin.mjs bun                  prints the path of the bun binary
//   node scripts/runtime-bin.mjs run biome check .    runs a tool (installing it first)
//   import { runtimeBin } from './runtime-bin.mjs'

import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// name → the npm packages to install (exact versions) and the binary to run. Bump here,
// nowhere else.
const pins = {
  bun: { packages: { bun: '1.4.5' } },
  deno: { packages: { deno: '2.9.6' } },
  workerd: { packages: { workerd: '1.20261117.1' } },
  biome: { packages: { '@biomejs/biome': '2.6.8' } },
  // TypeDoc reads the sources with its own TypeScript: pinned to the project's.
  typedoc: { packages: { typedoc: '0.28.20', typescript: '5.9.3' } },
  knip: { packages: { knip: '6.44.2', typescript: '5.9.3' } },
  publint: { packages: { publint: '0.3.25' } },
  attw: { packages: { '@arethetypeswrong/cli': '0.18.5' } },
}

// Packages that put their binary in place from a postinstall script.
const withInstallScripts = new Set(['bun', 'deno', 'workerd', '@biomejs/biome'])

const root = fileURLToPath(new URL('..', import.meta.url))

function read(file) {
  try {
    return readFileSync(file, 'utf8').trim()
  } catch {
    return undefined
  }
}

/** The path of the runtime's or tool's binary, installing its pinned packages first when needed. */
export function runtimeBin(name) {
  const pin = Object.hasOwn(pins, name) ? pins[name] : undefined
  if (pin === undefined) {
    throw new Error(`unknown runtime or tool ${name}: one of ${Object.keys(pins).join(', ')}`)
  }
  const specs = Object.entries(pin.packages).map(([pkg, version]) => `${pkg}@${version}`)
  const spec = specs.join(' ')
  const dir = join(root, '.runtimes', name)
  const bin = join(dir, 'node_modules', '.bin', name)
  // Written only after a whole install, so an interrupted one is redone.
  const marker = join(dir, 'installed')
  if (read(marker) === spec && existsSync(bin)) return bin

  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  // Install scripts are allowed by name and version only, so npm runs them without a warning
  // (npm versions before allowScripts run them anyway).
  const allowScripts = Object.fromEntries(
    Object.entries(pin.packages)
      .filter(([pkg]) => withInstallScripts.has(pkg))
      .map(([pkg, version]) => [`${pkg}@${version}`, true]),
  )
  const manifest = { private: true, dependencies: pin.packages, allowScripts }
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
  const [first, ...rest] = process.argv.slice(2)
  try {
    if (first === 'run') {
      const [name = '', ...args] = rest
      const result = spawnSync(runtimeBin(name), args, { stdio: 'inherit', cwd: process.cwd() })
      if (result.error !== undefined) throw result.error
      process.exit(result.status ?? 1)
    }
    console.log(runtimeBin(first ?? ''))
  } catch (error) {
    console.error(`runtime-bin: ${error?.message ?? error}`)
    process.exit(1)
  }
}
