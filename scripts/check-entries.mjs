// After `npm run build`: the subpath entries ("./node", "./otel", "./redis", "./testing") share the
// root's copy of the core (tsup.config.ts imports it by self-reference, `stream-boundary`, and
// `stream-boundary/advanced` for the names that live there). Checks that every name they import
// that way is exported by that entry, in the ESM and the CJS build, so a name moved off an entry
// fails here and not in a user's `require`.
// Also checks that every built file is Latin-1: V8 keeps a module's source for its lifetime, and
// one character past U+00FF (a `…` in a comment tsup keeps) stores the whole file as UTF-16,
// twice its size (dist/index.js: 0.3 MiB more in every process that imports the package).

import { readdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const dist = new URL('../dist/', import.meta.url)
/** The self-referenced entries: the specifier, its file, and the name esbuild gives it in CJS. */
const targets = [
  { specifier: 'stream-boundary', file: 'index', cjsVar: 'streamBoundary' },
  { specifier: 'stream-boundary/advanced', file: 'advanced', cjsVar: 'advanced' },
]
for (const target of targets) {
  target.esmNames = new Set(Object.keys(await import(new URL(`${target.file}.js`, dist).href)))
  target.cjsNames = new Set(Object.keys(require(`../dist/${target.file}.cjs`)))
}

let failed = 0
for (const entry of ['node', 'otel', 'redis', 'testing']) {
  const esm = readFileSync(new URL(`${entry}.js`, dist), 'utf8')
  const cjs = readFileSync(new URL(`${entry}.cjs`, dist), 'utf8')
  const missing = []
  for (const target of targets) {
    const from = target.specifier.replace('/', '\\/')
    const esmNames = [
      ...esm.matchAll(new RegExp(`^import \\{([^}]*)\\} from '${from}';$`, 'gm')),
    ].flatMap((match) =>
      (match[1] ?? '').split(',').map((name) => name.trim().split(/\s+as\s+/)[0]),
    )
    // esbuild names a required entry after its specifier: `var streamBoundary = require(...)`,
    // `var import_advanced = require('stream-boundary/advanced')`.
    const cjsVar = new RegExp(`var (\\w+) = require\\("${from}"\\)`).exec(cjs)?.[1]
    const cjsNames = cjsVar
      ? [...cjs.matchAll(new RegExp(`\\b${cjsVar}\\.(\\w+)`, 'g'))].map((match) => match[1])
      : []
    missing.push(
      ...esmNames
        .filter((name) => name !== '' && !target.esmNames.has(name))
        .map((name) => `${name} from '${target.specifier}' (ESM)`),
      ...cjsNames
        .filter((name) => !target.cjsNames.has(name))
        .map((name) => `${name} from '${target.specifier}' (CJS)`),
    )
  }
  for (const name of new Set(missing)) {
    console.error(`dist/${entry}: imports ${name}, which that entry does not export`)
    failed++
  }
  // Importing the ESM entry links it: a missing name would throw here too.
  await import(new URL(`${entry}.js`, dist).href)
}
for (const file of readdirSync(dist).filter((name) => /\.c?js$/.test(name))) {
  const lines = readFileSync(new URL(file, dist), 'utf8').split('\n')
  const at = lines.findIndex((line) => /[\u0100-\u{10ffff}]/u.test(line))
  if (at !== -1) {
    console.error(
      `dist/${file}:${at + 1}: a character past U+00FF makes V8 keep the file as UTF-16 (twice its size); write it in ASCII: ${lines[at]?.trim()}`,
    )
    failed++
  }
}
if (failed > 0) process.exit(1)
console.log('every built file is Latin-1 (one byte a character in V8)')
console.log('subpath entries import only exported names from the root and stream-boundary/advanced')
