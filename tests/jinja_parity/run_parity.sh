#!/bin/sh
# ctest entry for the chat-template parity check: installs the pinned @huggingface/jinja into
# WORK_DIR (the build tree; once), then renders every templates/*.jinja over cases.json with it
# and with `kimi render-template`, requiring identical bytes.
# usage: run_parity.sh KIMI_BINARY WORK_DIR
# Exits 77 (a skip for ctest) when npm cannot install the package, e.g. without network access.
set -u
here=$(cd "$(dirname "$0")" && pwd)
kimi=$1
work=$2
mkdir -p "$work" || exit 1
cp "$here/package.json" "$here/parity.mjs" "$work/" || exit 1
if [ ! -d "$work/node_modules/@huggingface/jinja" ]; then
  if ! (cd "$work" && npm install --no-audit --no-fund --loglevel=error >/dev/null); then
    echo "npm install of @huggingface/jinja failed: skipping the parity test"
    exit 77
  fi
fi
exec node "$work/parity.mjs" "$kimi" "$here/cases.json" "$here"/../../templates/*.jinja
