#!/usr/bin/env bash
# Packs the package as npm would publish it (the README's links made absolute, as `prepack`
# does), then checks the tarball: every README link works on the registry page
# (scripts/check-packed-readme.mjs), publint, and @arethetypeswrong/cli in every resolution it
# knows, node10 included (both fetched on first use by scripts/runtime-bin.mjs). Run after
# `npm run build`.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .pack && mkdir -p .pack
trap 'node scripts/readme-for-registry.mjs restore' EXIT
node scripts/readme-for-registry.mjs write
tarball=$(npm pack --ignore-scripts --silent --pack-destination .pack | tail -n 1)
node scripts/readme-for-registry.mjs restore
echo "packed .pack/$tarball"
node scripts/check-packed-readme.mjs ".pack/$tarball"
node scripts/runtime-bin.mjs run publint run ".pack/$tarball" --strict
node scripts/runtime-bin.mjs run attw ".pack/$tarball"
