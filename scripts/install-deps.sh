#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need (skipped when all are present).
# --reference also installs what reference/ needs (golden logits, training mini; a few hundred MB
# the build and the tests never use).
set -euo pipefail
packages=(build-essential cmake pkg-config nlohmann-json3-dev libgtest-dev libbenchmark-dev libpcre2-dev zlib1g-dev libucx-dev
          clang libclang-rt-14-dev  # clang + libFuzzer and the sanitizer runtimes for fuzz/run.sh
          libgloo-dev               # collectives for tensor/data/expert parallelism (src/parallel)
          libnuma-dev               # placing a node's ranks on its NUMA nodes (src/parallel/numa)
          ccache)                   # optional for the build, but reruns then rebuild only what changed
if [ "${1:-}" = "--reference" ]; then
  # golden logits and mini training (OpenBLAS: Debian's torch otherwise uses the ~10x slower
  # reference BLAS), then the text of the mini corpus (reference/mini_data.py)
  packages+=(python3-torch python3-numpy libopenblas0-openmp python3.11-doc debian-handbook fortunes manpages)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# node and npm run the parity tests against the npm reference implementations; a machine that
# already has them (from any source) keeps its own.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
