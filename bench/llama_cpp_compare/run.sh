#!/bin/bash
# kimi.cpp side by side with llama.cpp on one model: makes the model (`kimi make-model`) unless it
# exists, exports it (`kimi export-gguf`), installs the pinned node-llama-cpp (its prebuilt
# llama.cpp CPU binaries; nothing is downloaded from GitHub or compiled) into the work dir, and
# runs compare.mjs: the same prompt token ids through both engines with the same thread count,
# printing prefill and decode tok/s of each, kimi's ratio over llama.cpp, and the greedy-token
# agreement.
#
# usage: bench/llama_cpp_compare/run.sh [--preset small|tiny] [--dtype bf16|f32] [--threads N]
#            [--kimi PATH] [--work DIR] [--prompts K] [--prompt-len P] [--gen G] [--check]
#            [--kimi-dtype auto|float32|bfloat16]
#
#   --preset    the make-model preset (default small, the benchmark model)
#   --dtype     the checkpoint's and the GGUF's float type (default bf16: the speed figures are
#               BF16 weights on both sides; the greedy agreement is then also checked, untimed,
#               against llama.cpp on the same weights widened to F32 (`export-gguf --outtype f32`),
#               since llama.cpp's CPU BF16 matmul rounds activations to BF16 and random weights
#               leave close logits and routing scores). f32: F32 weights and compute on both sides
#   --threads   threads for each engine (default: all CPUs)
#   --kimi      the kimi binary (default: build/kimi of this checkout)
#   --work      models, GGUF and npm packages go here (default: llama_cpp_compare/ next to --kimi)
#   --prompts/--prompt-len/--gen  K prompts of P ids, G generated tokens each (default 3 x 128
#               ids, 64 tokens; 3 x 32 ids, 16 tokens on tiny)
#   --kimi-dtype  kimi's --dtype (bfloat16: activations rounded to bf16 in its BF16 linears, as
#               llama.cpp's BF16 matmul does; auto: what kimi serve runs; default: float32)
#   --check     exit 1 unless every greedy token agrees in the exact (F32) comparison (the ctest
#               llama_cpp_parity runs --preset tiny --dtype f32 --threads 1 --check)
# Exits 77 when the npm packages cannot be installed (no registry) or the platform has no
# prebuilt binary (node-llama-cpp's linux-x64 package is the one pinned).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

preset=small dtype=bf16 threads=$(nproc) kimi="$repo/build/kimi" work="" extra=()
prompts="" prompt_len="" gen=""
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --kimi) kimi=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --prompt-len) prompt_len=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --check) extra+=(--check); shift ;;
    --kimi-dtype) extra+=(--kimi-dtype "$2"); shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$dtype" in bf16|f32) ;; *) echo "run.sh: --dtype must be bf16 or f32" >&2; exit 2 ;; esac
[ -x "$kimi" ] || { echo "run.sh: no kimi binary at $kimi (build it, or pass --kimi)" >&2; exit 2; }
kimi=$(cd "$(dirname "$kimi")" && pwd)/$(basename "$kimi")
[ -n "$work" ] || work=$(dirname "$kimi")/llama_cpp_compare
mkdir -p "$work"
work=$(cd "$work" && pwd)

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "run.sh: node-llama-cpp's prebuilt binaries are pinned for linux-x64 only: skipping"
  exit 77
fi
command -v node >/dev/null && command -v npm >/dev/null || { echo "run.sh: node/npm not found: skipping"; exit 77; }

# The pinned packages, installed once per package.json. No install scripts run (node-llama-cpp's
# postinstall would look for a GitHub build), and only the linux-x64 binaries package (a direct
# dependency) comes, not the optional CUDA/Vulkan ones: the prebuilt CPU binaries are in it.
npm_dir="$work/npm"
mkdir -p "$npm_dir"
if ! cmp -s "$here/package.json" "$npm_dir/package.json" || [ ! -d "$npm_dir/node_modules/node-llama-cpp" ] ||
   [ ! -d "$npm_dir/node_modules/@node-llama-cpp/linux-x64" ]; then
  rm -f "$npm_dir/package.json"
  cp "$here/package.json" "$npm_dir/package.json.new"
  if ! (cd "$npm_dir" && mv package.json.new package.json &&
        NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-save --no-package-lock --omit=optional --ignore-scripts \
          --no-audit --no-fund --loglevel=error >/dev/null); then
    rm -f "$npm_dir/package.json"
    echo "run.sh: npm could not install node-llama-cpp: skipping"
    exit 77
  fi
fi
cp "$here/compare.mjs" "$npm_dir/"

# The model, made unless present (or older than the kimi binary), and its GGUF conversion.
model="$work/$preset-$dtype"
if [ ! -f "$model/config.json" ] || [ "$kimi" -nt "$model/config.json" ]; then
  rm -rf "$model"
  "$kimi" make-model "$model" --preset "$preset" --dtype "$dtype" >/dev/null
fi
gguf="$work/$preset-$dtype.gguf"
if [ ! -f "$gguf" ] || [ "$kimi" -nt "$gguf" ] || [ "$model/config.json" -nt "$gguf" ]; then
  "$kimi" export-gguf "$model" "$gguf" >/dev/null
fi

# For BF16 also the same weights widened to F32 (the exact, untimed agreement check).
if [ "$dtype" = bf16 ]; then
  gguf_f32="$work/$preset-bf16-as-f32.gguf"
  if [ ! -f "$gguf_f32" ] || [ "$kimi" -nt "$gguf_f32" ] || [ "$model/config.json" -nt "$gguf_f32" ]; then
    "$kimi" export-gguf "$model" "$gguf_f32" --outtype f32 >/dev/null
  fi
  extra+=(--gguf-f32 "$gguf_f32")
fi

args=(--kimi "$kimi" --model "$model" --gguf "$gguf" --threads "$threads"
      --label "preset $preset, ${dtype^^} weights on both sides: safetensors for kimi, GGUF for llama.cpp")
if [ "$preset" != tiny ]; then : "${prompt_len:=128}" "${gen:=64}"; fi
[ -z "$prompts" ] || args+=(--prompts "$prompts")
[ -z "$prompt_len" ] || args+=(--prompt-len "$prompt_len")
[ -z "$gen" ] || args+=(--gen "$gen")
cd "$npm_dir"
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true exec node compare.mjs "${args[@]}" ${extra[@]+"${extra[@]}"}
