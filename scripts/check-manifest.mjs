// Before `npm pack` / `npm publish` (the `prepack` script, after the build): every file the
// manifest points a user at exists: `main`, `module`, `types`, `bin`, each `exports` target and
// each `typesVersions` target. An unbuilt clone then fails to pack instead of packing a package
// without dist/.

import { existsSync, readFileSync } from 'node:fs'

const root = new URL('../', import.meta.url)
const manifest = JSON.parse(readFileSync(new URL('package.json', root), 'utf8'))

/** Every string leaf of a manifest field: the files it names. */
function targets(value) {
  if (typeof value === 'string') return [value]
  if (Array.isArray(value)) return value.flatMap(targets)
  if (typeof value === 'object' && value !== null) return Object.values(value).flatMap(targets)
  return []
}

const named = [
  manifest.main,
  manifest.module,
  manifest.types,
  ...targets(manifest.bin),
  ...targets(manifest.exports),
  ...targets(manifest.typesVersions),
].filter((path) => typeof path === 'string' && !path.includes('*'))
const missing = [...new Set(named)].filter((path) => !existsSync(new URL(path, root)))
if (missing.length > 0) {
  console.error(
    `the manifest names files that do not exist (run \`npm run build\`): ${missing.join(', ')}`,
  )
  process.exit(1)
}
console.log(`package.json: all ${new Set(named).size} files it names exist`)
