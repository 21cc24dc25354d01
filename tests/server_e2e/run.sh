#!/usr/bin/env bash
# ctest entry: installs the pinned npm packages into the build tree (once) and runs the test.
# Usage: run.sh KIMI_BINARY WORK_DIR [--eagle3 | --disagg | --tp2dp2]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kimi=$1
work=$2
mkdir -p "$work"
cp "$here/package.json" "$here/e2e.js" "$here/../e2e_common/e2e_helpers.js" "$work/"
if [ ! -d "$work/node_modules/openai" ]; then
  (cd "$work" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
exec node "$work/e2e.js" "$kimi" "${@:3}"
