#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install, then build and run every test
# twice, in Release and under AddressSanitizer + UndefinedBehaviorSanitizer, then run every
# libFuzzer target for a bounded time (fuzz/run.sh: clang, ASan + UBSan, 20 s per target).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$root/scripts/install-deps.sh"
# ccache, where installed, makes a rerun (or a second clone on the same machine) rebuild only
# what changed; paths are taken relative to the clone so that clones share the cache.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root"
fi
status=0
for config in release asan; do
  dir="$root/build-test-$config"
  flags=(-DCMAKE_BUILD_TYPE=Release -DKIMI_BUILD_BENCH=OFF "${launcher[@]}")
  [ "$config" = asan ] && flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKIMI_SANITIZE=ON -DKIMI_BUILD_BENCH=OFF "${launcher[@]}")
  echo "=== $config: build"
  start=$(date +%s)
  cmake -S "$root" -B "$dir" "${flags[@]}" >/dev/null
  cmake --build "$dir" -j"$jobs"
  echo "=== $config: built in $(( $(date +%s) - start )) s; test"
  start=$(date +%s)
  (cd "$dir" && ctest -j"$jobs" --output-on-failure) || status=1
  echo "=== $config: tested in $(( $(date +%s) - start )) s"
done
echo "=== fuzz: build and run every target (${KIMI_FUZZ_SECONDS:-20} s each)"
fuzz_start=$(date +%s)
"$root/fuzz/run.sh" --seconds "${KIMI_FUZZ_SECONDS:-20}" --build "$root/build-test-fuzz" --jobs "$jobs" || status=1
echo "=== fuzz: $(( $(date +%s) - fuzz_start )) s in all"
exit $status
