#!/usr/bin/env bash
# Makes sure `redis-server` is installed: the Redis key pool tests (test/redis/) start their
# own servers on free loopback ports and stop them after, and fail when it is missing.
# On a clean Debian/Ubuntu machine (CI runs as root) it installs Debian's package.
set -euo pipefail

if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo 'redis-server not found: install it (apt-get install redis-server)' >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends redis-server
fi
redis-server --version
