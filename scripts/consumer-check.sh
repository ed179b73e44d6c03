#!/usr/bin/env bash
# A consumer's view of the packed package: `npm pack`, unpack the tarball into a throwaway
# project's node_modules/stream-boundary (its dependencies linked from this repo, so no
# network), then `import` and `require` every entry, and use each once, on Node 20 (the
# machine's) and Node 22; type-check a consumer of every entry in each TypeScript module
# resolution (node10, node16, nodenext, bundler; CJS and ESM files). Also checks that the entries share one copy of the core: errors
# built by `/redis`, or by core code `/testing` runs, are `instanceof` the root's classes.
# Run after `npm run build`.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

system_node=$(command -v node)
# Node 22 from the npm package `node`, kept out of node_modules (see scripts/runtimes.sh).
node22=".runtimes/node22/node_modules/node/bin/node"
[ -x "$node22" ] || npm install --prefix .runtimes/node22 node@22 --no-audit --no-fund --no-save --silent >/dev/null
node22="$repo/$node22"

work=$(mktemp -d "${TMPDIR:-/tmp}/stream-boundary-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
tarball=$(npm pack --ignore-scripts --silent --pack-destination "$work" | tail -n 1)
echo "packed $tarball"

app="$work/app"
mkdir -p "$app/node_modules/stream-boundary"
tar -xzf "$work/$tarball" -C "$app/node_modules/stream-boundary" --strip-components=1
printf '{ "name": "consumer", "private": true }\n' >"$app/package.json"

# Link what the packed package.json asks for (dependencies, optional ones and peers) from this repo.
"$system_node" -e '
  const manifest = require(process.argv[1])
  const { dependencies, optionalDependencies, peerDependencies } = manifest
  const names = Object.keys({ ...dependencies, ...optionalDependencies, ...peerDependencies })
  console.log(names.join("\n"))
' "$app/node_modules/stream-boundary/package.json" | while read -r dep; do
  [ -n "$dep" ] || continue
  if [ ! -e "$repo/node_modules/$dep" ]; then
    echo "not installed here: $dep" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$app/node_modules/$dep")"
  ln -s "$repo/node_modules/$dep" "$app/node_modules/$dep"
  echo "linked $dep"
done

cat >"$app/esm.mjs" <<'EOF'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import fc from 'fast-check'
import * as root from 'stream-boundary'
import * as advanced from 'stream-boundary/advanced'
import * as node from 'stream-boundary/node'
import * as otel from 'stream-boundary/otel'
import * as redis from 'stream-boundary/redis'
import * as testing from 'stream-boundary/testing'

const require = createRequire(import.meta.url)
const checks = {
  "import 'stream-boundary'": () => typeof root.relay === 'function' && typeof root.webSink === 'function',
  "import 'stream-boundary/advanced'": () => Object.isFrozen(advanced.relayDefaults) && typeof advanced.sanitizeMessage === 'function',
  "import 'stream-boundary/node'": () => typeof node.nodeSink === 'function' && typeof node.serveFetch === 'function' && typeof node.iterableResponse === 'function',
  "import 'stream-boundary/testing'": () => typeof testing.checkAdapter === 'function' && typeof testing.arbitraries.protocolStream === 'function',
  "import 'stream-boundary/redis'": () => typeof redis === 'object',
  "import 'stream-boundary/otel'": () => typeof otel.createRelayTelemetry === 'function',
  'the root entry imports nothing of OpenTelemetry (ESM and CJS)': () =>
    ['stream-boundary', 'stream-boundary/node', 'stream-boundary/redis', 'stream-boundary/testing'].every((entry) => {
      const file = fileURLToPath(import.meta.resolve(entry))
      return [file, file.replace(/\.js$/, '.cjs')].every((path) => !readFileSync(path, 'utf8').includes('@opentelemetry'))
    }),
  ...oneCore(root, redis, testing, fc, 'ESM'),
  'ESM: the subpath entries import the core from the root, no copy of their own': () =>
    ['node', 'otel', 'redis', 'testing'].every((entry) => coreImportsOnlyRoot(`stream-boundary/${entry}`)),
  // Its own copy of data and pure functions is harmless only while it holds no class and no state.
  'ESM and CJS: stream-boundary/advanced defines no class': () => {
    const file = fileURLToPath(import.meta.resolve('stream-boundary/advanced'))
    return [file, file.replace(/\.js$/, '.cjs')].every((path) => !/\bclass\b/.test(readFileSync(path, 'utf8').replace(/\/\/.*$/gm, '')))
  },
  'error guards match across the ESM and CJS copies': () => {
    const cjs = require('stream-boundary')
    return root.isFrameTooLargeError(new cjs.FrameTooLargeError(1, 2)) && cjs.isFrameTooLargeError(new root.FrameTooLargeError(1, 2))
  },
  'ESM: relay over a faulty upstream served on 127.0.0.1': () => relayOnce(root, testing),
}
await runChecks(checks)

/**
 * One copy of each class across the entries: errors built by a subpath entry, or by core
 * code a subpath entry runs, are instances of the root's classes.
 */
export function oneCore(sb, redisEntry, kit, fc, format) {
  return {
    [`${format}: an error built by 'stream-boundary/redis' is instanceof the root's StreamBoundaryError`]: () => {
      const error = new redisEntry.RedisUnavailableError('acquire', new Error('down'))
      return error instanceof sb.StreamBoundaryError && sb.isStreamBoundaryError(error)
    },
    [`${format}: an error the testing kit gets from the core is instanceof the root's classes`]: async () => {
      // A frame past the reader's 1 MiB bound: checkAdapter's reader fails with FrameTooLargeError.
      const big = new TextEncoder().encode(`data: ${'x'.repeat(1_100_000)}\n\n`)
      try {
        await kit.checkAdapter(sb.openaiChat, { streams: fc.constant(big), numRuns: 40, seed: 7 })
      } catch (error) {
        return error.cause instanceof sb.FrameTooLargeError && error.cause instanceof sb.StreamBoundaryError
      }
      return false
    },
  }
}

/** The built entry's imports of the package itself name only the root (and `./node`). */
function coreImportsOnlyRoot(specifier) {
  const code = readFileSync(fileURLToPath(import.meta.resolve(specifier)), 'utf8')
  const own = [...code.matchAll(/from '(stream-boundary[^']*)'/g)].map((match) => match[1])
  // A private copy of the core would define its own base error class.
  return (
    own.every((name) => name === 'stream-boundary' || name === 'stream-boundary/advanced') &&
    !/StreamBoundaryError = class|class StreamBoundaryError/.test(code)
  )
}

export async function relayOnce(sb, kit) {
  const upstream = kit.createFaultyUpstream({ scenarios: { flaky: ['empty', 'ok'] } })
  const url = await upstream.listen()
  try {
    const { sink, response } = sb.webSink()
    const outcome = sb.relay({
      sink,
      pool: sb.createMemoryKeyPool([{ id: 'a', secret: 'sk-a' }, { id: 'b', secret: 'sk-b' }]),
      adapter: sb.openaiChat,
      attempt: ({ signal }) =>
        fetch(`${url}/v1/chat/completions`, { method: 'POST', body: '{"stream":true}', signal, headers: { 'x-fault-scenario': 'flaky' } }),
    })
    const text = await (await response).text()
    return (await outcome).kind === 'committed' && text.includes('lazy') && upstream.requests.length === 2
  } finally {
    await upstream.close()
  }
}

async function runChecks(table) {
  let failed = 0
  for (const [name, check] of Object.entries(table)) {
    let ok = false
    try {
      ok = (await check()) === true
    } catch (error) {
      console.log(`     ${error?.stack ?? error}`)
    }
    if (!ok) failed++
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}`)
  }
  if (failed > 0) process.exitCode = 1
}
EOF

cat >"$app/cjs.cjs" <<'EOF'
const root = require('stream-boundary')
const node = require('stream-boundary/node')
const advanced = require('stream-boundary/advanced')
const testing = require('stream-boundary/testing')
const redis = require('stream-boundary/redis')
const otel = require('stream-boundary/otel')
const manifest = require('stream-boundary/package.json')

const checks = {
  "require('stream-boundary')": () => typeof root.relay === 'function' && typeof root.createResilientFetch === 'function',
  "require('stream-boundary/node')": () => typeof node.nodeSink === 'function' && typeof node.iterableResponse === 'function',
  "require('stream-boundary/advanced')": () => advanced.relayDefaults.maxAttempts > 0 && typeof advanced.classifyAttemptFailure === 'function',
  "require('stream-boundary/testing')": () => typeof testing.createFaultyUpstream === 'function',
  "require('stream-boundary/redis')": () => typeof redis === 'object',
  "require('stream-boundary/otel')": () => typeof otel.createRelayTelemetry === 'function',
  "require('stream-boundary/package.json')": () => manifest.name === 'stream-boundary',
  'CJS: the testing kit runs on the root module itself (so its adapters are === the root ones)': () => {
    const testingModule = require.cache[require.resolve('stream-boundary/testing')]
    return testingModule.children.some((child) => child.exports === root && child.exports.openaiChat === root.openaiChat)
  },
  'CJS: relay over a faulty upstream on 127.0.0.1': async () => {
    const { relayOnce } = await import('./esm-relay.mjs')
    return relayOnce(root, testing)
  },
}

;(async () => {
  const { oneCore } = await import('./esm-relay.mjs')
  Object.assign(checks, oneCore(root, redis, testing, require('fast-check'), 'CJS'))
  let failed = 0
  for (const [name, check] of Object.entries(checks)) {
    let ok = false
    try {
      ok = (await check()) === true
    } catch (error) {
      console.log(`     ${error && error.stack ? error.stack : error}`)
    }
    if (!ok) failed++
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}`)
  }
  if (failed > 0) process.exitCode = 1
})()
EOF
# The shared helpers alone, without esm.mjs's top-level checks, for the CJS run.
sed -n '/^export function oneCore/,/^}/p; /^export async function relayOnce/,/^}/p' "$app/esm.mjs" >"$app/esm-relay.mjs"

# Types, from the tarball, in every module resolution a consumer may use: each entry resolves
# to its declarations (not `any`: every `@ts-expect-error` below must find its error), with
# the package's declarations themselves checked too (skipLibCheck off; on under node10 only,
# where fast-check's own declarations do not resolve pure-rand's: not ours to fix).
mkdir -p "$app/node_modules/@types"
ln -s "$repo/node_modules/@types/node" "$app/node_modules/@types/node"
types_source='import { createMemoryKeyPool, openaiChat, type RelayOutcome, relay } from "stream-boundary"
import { relayDefaults } from "stream-boundary/advanced"
import { fastifySink, nodeHttpAttempt, nodeSink, readNodeRequest } from "stream-boundary/node"
import { createRelayTelemetry } from "stream-boundary/otel"
import { createRedisKeyPool } from "stream-boundary/redis"
import { createFaultyUpstream } from "stream-boundary/testing"

export const attempts: number = relayDefaults.maxAttempts
export const pool = createMemoryKeyPool([{ id: "a", secret: "sk-a" }])
export const kind = (outcome: RelayOutcome): string => outcome.kind
export const used = [relay, openaiChat, fastifySink, nodeHttpAttempt, nodeSink, readNodeRequest]
// Each entry is typed, not `any`: a function is not a string.
// @ts-expect-error the root
export const e1: string = relay
// @ts-expect-error stream-boundary/advanced
export const e2: string = relayDefaults
// @ts-expect-error stream-boundary/node
export const e3: string = nodeSink
// @ts-expect-error stream-boundary/otel
export const e4: string = createRelayTelemetry
// @ts-expect-error stream-boundary/redis
export const e5: string = createRedisKeyPool
// @ts-expect-error stream-boundary/testing
export const e6: string = createFaultyUpstream
// Types a subpath entry takes from the root resolve too (a DownstreamSink, a KeyPool).
// @ts-expect-error a DownstreamSink has no "nope"
nodeSink(null as never).nope
// @ts-expect-error a KeyPool has no "nope"
createRedisKeyPool(null as never).nope
'
tsc="$repo/node_modules/typescript/bin/tsc"
# name, module, moduleResolution, file (its extension says CJS or ESM under node16/nodenext)
while read -r name module resolution file skip_lib_check; do
  dir="$app/types-$name"
  mkdir -p "$dir"
  printf '%s' "$types_source" >"$dir/$file"
  cat >"$dir/tsconfig.json" <<JSON
{
  "compilerOptions": {
    "module": "$module",
    "moduleResolution": "$resolution",
    "target": "es2022",
    "lib": ["es2022", "dom"],
    "types": ["node"],
    "strict": true,
    "noEmit": true,
    "skipLibCheck": $skip_lib_check,
    "esModuleInterop": true
  },
  "files": ["$file"]
}
JSON
  if (cd "$dir" && "$system_node" "$tsc" -p tsconfig.json >"$dir/tsc.log" 2>&1); then
    echo "ok   types: $name (module $module, moduleResolution $resolution, $file, skipLibCheck $skip_lib_check)"
  else
    echo "FAIL types: $name (module $module, moduleResolution $resolution, $file)"
    sed 's/^/     /' "$dir/tsc.log"
    types_failed=1
  fi
done <<'MODES'
node10-cjs commonjs node10 consumer.ts true
node16-cjs node16 node16 consumer.cts false
node16-esm node16 node16 consumer.mts false
nodenext-cjs nodenext nodenext consumer.cts false
nodenext-esm nodenext nodenext consumer.mts false
bundler-esm esnext bundler consumer.ts false
bundler-preserve preserve bundler consumer.ts false
MODES

status=${types_failed:-0}
for runtime in "$system_node" "$node22"; do
  printf '\n--- node %s\n' "$("$runtime" --version)"
  (cd "$app" && timeout 60 "$runtime" esm.mjs) || status=1
  (cd "$app" && timeout 60 "$runtime" cjs.cjs) || status=1
done
exit $status
