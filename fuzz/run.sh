#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in their own build directory and runs
# each for a bounded time over a scratch copy of its seed corpus (fuzz/corpus/<name>/), so the
# committed corpus is never modified, with fuzz/<name>.dict as its dictionary when there is one. Fails if any target crashes, leaks, hangs or breaks one of
# its checked properties; the reproducer is kept in the work directory and named in the output.
#
#   fuzz/run.sh [--seconds N] [--build DIR] [--work DIR] [--jobs N] [TARGET...]
#
# Defaults: 20 s per target, build in build-fuzz/, work in build-fuzz/runs/, every target.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=20
build="$root/build-fuzz"
work=""
jobs=$(nproc)
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ -n "$work" ] || work="$build/runs"
cxx=${CXX_FUZZ:-$(command -v clang++ || true)}
[ -n "$cxx" ] || { echo "fuzz: clang++ not found (scripts/install-deps.sh installs clang)"; exit 1; }

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "=== fuzz: build ($cxx)"
start=$(date +%s)
cmake -S "$root/fuzz" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" >/dev/null
cmake --build "$build" -j"$jobs"
echo "=== fuzz: built in $(( $(date +%s) - start )) s"

if [ ${#targets[@]} -eq 0 ]; then
  for src in "$root"/fuzz/*_fuzz.cpp; do
    name=$(basename "$src" _fuzz.cpp)
    targets+=("$name")
  done
fi

# Leak checking stays on; the timeout turns a hang into a failure; rss_limit bounds memory.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for name in "${targets[@]}"; do
  bin="$build/fuzz_$name"
  [ -x "$bin" ] || { echo "fuzz: no binary for target '$name'"; status=1; continue; }
  dir="$work/$name"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  [ -d "$root/fuzz/corpus/$name" ] && cp -r "$root/fuzz/corpus/$name/." "$dir/corpus/"
  dict=()
  [ -f "$root/fuzz/$name.dict" ] && dict=(-dict="$root/fuzz/$name.dict")
  echo "=== fuzz: $name for ${seconds} s"
  if "$bin" "$dir/corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1; then
    grep -E '^#[0-9]+.*(DONE|cov:)' "$dir/log" | tail -1 || true
  else
    status=1
    echo "fuzz: $name FAILED; log $dir/log, reproducer(s):"
    ls "$dir/artifacts/" | sed "s|^|  $dir/artifacts/|"
    grep -E 'ERROR|property violated|SUMMARY|runtime error' "$dir/log" | head -5 || true
  fi
done
exit $status
