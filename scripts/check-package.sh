#!/usr/bin/env bash
# Packs the package as npm would publish it, then checks the tarball with publint and
# @arethetypeswrong/cli in every resolution it knows, node10 included (both fetched on first use
# by scripts/runtime-bin.mjs). Run after
# `npm run build`.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .pack && mkdir -p .pack
tarball=$(npm pack --ignore-scripts --silent --pack-destination .pack | tail -n 1)
echo "packed .pack/$tarball"
node scripts/runtime-bin.mjs run publint run ".pack/$tarball" --strict
node scripts/runtime-bin.mjs run attw ".pack/$tarball"
