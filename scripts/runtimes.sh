#!/usr/bin/env bash
# Runs test/runtimes/core-suite.mjs against the built package (dist/) on every runtime a
# gateway runs on: Node 20 (the machine's), Node 22 and 24 (the npm package `node`, installed
# into .runtimes/ so its `node` binary never shadows the machine's in node_modules/.bin),
# Bun and Deno (the npm packages bun and deno at the versions pinned in scripts/runtime-bin.mjs,
# installed on first use into .runtimes/ too: they are not devDependencies, so `npm ci` does not
# fetch them). Fails when any runtime fails. Run after `npm run build`.
set -uo pipefail
cd "$(dirname "$0")/.."

system_node=$(command -v node)
for major in 22 24; do
  if [ ! -x ".runtimes/node$major/node_modules/node/bin/node" ]; then
    npm install --prefix ".runtimes/node$major" "node@$major" --no-audit --no-fund --no-save --silent >/dev/null
  fi
done
bun=$(node scripts/runtime-bin.mjs bun) || bun=
deno=$(node scripts/runtime-bin.mjs deno) || deno=
suite=test/runtimes/core-suite.mjs

if [ ! -f dist/index.js ]; then
  echo 'dist/ is missing: run npm run build first' >&2
  exit 1
fi

failed=()
run() {
  local name=$1
  shift
  printf '\n--- %s\n' "$name"
  if [ -z "$1" ]; then
    echo "$name: not installed (see the error above)"
    failed+=("$name")
    return
  fi
  if ! timeout 120 "$@" "$suite"; then failed+=("$name"); fi
}

run "node (system)" "$system_node"
run "node 22" .runtimes/node22/node_modules/node/bin/node
run "node 24" .runtimes/node24/node_modules/node/bin/node
run "bun" "$bun"
# Deno reads package.json and resolves bare specifiers from the existing node_modules/;
# --cached-only keeps it off the network, --no-lock from writing deno.lock.
run "deno" "$deno" run --allow-all --node-modules-dir=manual --cached-only --no-lock

if [ ${#failed[@]} -gt 0 ]; then
  printf '\nruntimes failed: %s\n' "${failed[*]}"
  exit 1
fi
printf '\nall runtimes passed\n'
