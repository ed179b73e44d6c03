// After `npm run build`: the subpath entries ("./node", "./otel", "./redis", "./testing") share the
// root's copy of the core (tsup.config.ts imports it by self-reference, `stream-boundary`).
// Checks that every name they import that way is a root export, in the ESM and the CJS
// build, so a name moved off the root fails here and not in a user's `require`.

import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const dist = new URL('../dist/', import.meta.url)
const rootNames = new Set(Object.keys(await import(new URL('index.js', dist).href)))
const cjsRootNames = new Set(Object.keys(require('../dist/index.cjs')))

let failed = 0
for (const entry of ['node', 'otel', 'redis', 'testing']) {
  const esm = readFileSync(new URL(`${entry}.js`, dist), 'utf8')
  const cjs = readFileSync(new URL(`${entry}.cjs`, dist), 'utf8')
  const esmNames = [...esm.matchAll(/^import \{([^}]*)\} from 'stream-boundary';$/gm)].flatMap(
    (match) => (match[1] ?? '').split(',').map((name) => name.trim().split(/\s+as\s+/)[0]),
  )
  // esbuild names the required root after the package: `var streamBoundary = require(...)`.
  const cjsNames = [...cjs.matchAll(/\bstreamBoundary\.(\w+)/g)].map((match) => match[1])
  const missing = [
    ...esmNames.filter((name) => name !== '' && !rootNames.has(name)).map((n) => `${n} (ESM)`),
    ...cjsNames.filter((name) => !cjsRootNames.has(name)).map((n) => `${n} (CJS)`),
  ]
  for (const name of new Set(missing)) {
    console.error(
      `dist/${entry}: imports ${name} from 'stream-boundary', which the root does not export`,
    )
    failed++
  }
  // Importing the ESM entry links it: a missing name would throw here too.
  await import(new URL(`${entry}.js`, dist).href)
}
if (failed > 0) process.exit(1)
console.log('subpath entries import only root exports from the core')
