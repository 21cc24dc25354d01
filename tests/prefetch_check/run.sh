#!/bin/bash
# Checks that the compiled decode kernels still prefetch their weights: GCC deleted every call to
# a helper whose only effect was __builtin_prefetch (it finds such a helper "pure"), and nothing
# but the timings showed it (kernels/prefetch.h). Each pattern below names the one-row, one-token
# (GEMV) instantiations of a kernel that prefetches; every function it matches, and at least
# one, must contain a prefetch instruction. Usage: run.sh BINARY (an optimised build of kimi).
set -euo pipefail
bin=${1:?usage: run.sh BINARY}
command -v objdump > /dev/null || { echo "objdump not found (binutils)"; exit 1; }

# "count<TAB>name" per function of the binary, split-off cold parts left out.
table=$(objdump -d -C --no-show-raw-insn "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ {
    if (name != "") print n "\t" name
    name = $0; sub(/^[0-9a-f]+ </, "", name); sub(/>:$/, "", name); n = 0; next
  }
  /\tprefetch/ { n++ }
  END { if (name != "") print n "\t" name }' | grep -v '\[clone \.cold\]')

patterns=(
  'int_tile<[^,]*QuantTraits<(true|false)(, (true|false))?>, 1, 1,'            # W4A8 / W8A8
  'int4_i16_words16_tile<[^,]*QuantTraits<(true|false)(, (true|false))?>, 1, 1,' # W4A16, int16 act. (AVX-512)
  'int4_i16_words16_runs<[^,]*QuantTraits<(true|false)(, (true|false))?>, '      # ... its streamed decode
  'int4_i16_words8_tile<[^,]*QuantTraits<(true|false)>, 1, 1,'                   # W4A16, int16 act. (AVX2)
  'int4_i16_words8_runs<[^,]*QuantTraits<(true|false)>, '                         # ... its streamed decode
  'int4_f32_words_tile<[^,]*QuantTraits<(true|false)(, (true|false))?>, 1, 1,'   # W4A16, f32 act. (AVX-512)
  'dot_tile<[^,]*::Avx(2|512)Traits, [^,]*, 1, 1, [0-9]+, true>' # float GEMV
  '::tile<1, 1, (0|32|64)>'                                     # W4A16, AVX512_BF16
)
status=0
for p in "${patterns[@]}"; do
  matches=$(grep -E "$p" <<< "$table" || true)
  if [ -z "$matches" ]; then
    echo "FAIL: no function matches /$p/ (renamed or inlined? update the pattern)"
    status=1
    continue
  fi
  missing=$(awk -F'\t' '$1 == 0 { print $2 }' <<< "$matches")
  count=$(grep -c . <<< "$matches")
  if [ -n "$missing" ]; then
    echo "FAIL: /$p/: functions without a prefetch instruction:"
    echo "$missing" | sed 's/^/  /' | cut -c1-200
    status=1
  else
    echo "ok: /$p/: $count functions, all prefetch"
  fi
done
exit $status
