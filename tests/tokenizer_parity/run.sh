#!/usr/bin/env bash
# The ctest entry of the tokenizer parity check: installs js-tiktoken and tiktoken from npm into
# WORK_DIR (once; WORK_DIR is in the build tree) and runs parity.js against KIMI_BINARY.
# Exits 77 (ctest: skipped) when npm cannot install them, e.g. without a registry.
# usage: run.sh KIMI_BINARY WORK_DIR
set -uo pipefail
kimi=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
if [ ! -d "$work/node_modules/js-tiktoken" ] || [ ! -d "$work/node_modules/tiktoken" ] ||
   ! cmp -s "$here/package.json" "$work/package.json"; then
  cp "$here/package.json" "$work/package.json"
  if ! (cd "$work" && npm install --no-package-lock --no-audit --no-fund --loglevel=error); then
    echo "tokenizer parity: npm install failed; skipped"
    exit 77
  fi
fi
NODE_PATH="$work/node_modules" exec node "$here/parity.js" --kimi "$kimi" --work "$work" --repo "$here/../.."
