#include "kernels/cpu_features.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "kernels/bf16_dot_rate.h"

namespace kimi {

namespace {

constexpr const char* kCapVariable = "KIMI_MAX_CPU_ISA";

// The cap in effect (read once with the features; an unknown value is reported and ignored).
std::optional<Isa> read_cap() {
  const char* v = std::getenv(kCapVariable);
  if (!v || !*v) return std::nullopt;
  const std::optional<Isa> cap = parse_isa(v);
  if (!cap) std::fprintf(stderr, "kimi: ignoring %s=%s (expected scalar, avx2 or avx512)\n", kCapVariable, v);
  return cap;
}

const std::optional<Isa>& cap() {
  static const std::optional<Isa> c = read_cap();
  return c;
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's checks include the OS side (XCR0 via xgetbv): a CPU with AVX-512 under a kernel
  // that does not save the zmm state reports no AVX-512, which is what we want.
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512_vbmi = __builtin_cpu_supports("avx512vbmi");
  f.avx_vnni = __builtin_cpu_supports("avxvnni");
  f.intel = __builtin_cpu_is("intel");
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = cap() ? capped_features(detect(), *cap()) : detect();
  return features;
}

std::optional<Isa> parse_isa(std::string_view name) {
  std::string lower;
  for (char ch : name) lower += char(std::tolower(static_cast<unsigned char>(ch)));
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (lower == isa_name(isa)) return isa;
  return std::nullopt;
}

CpuFeatures capped_features(CpuFeatures f, Isa cap) {
  if (cap == Isa::Avx512) return f;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512_bf16 = f.avx512_vnni = f.avx512_vbmi = false;
  if (cap == Isa::Avx2) return f;
  f.avx2 = f.fma = f.f16c = f.avx_vnni = false;
  return f;
}

std::string kernel_isa_summary() {
  const CpuFeatures& f = cpu_features();
  const Isa isa = best_isa();
  std::string ext;
  const auto add = [&](bool on, const char* name) {
    if (on) ext += std::string(ext.empty() ? "" : ", ") + "+" + name;
  };
  if (isa == Isa::Avx512 && f.avx512_bf16) {
    // Where VDPBF16PS is slow the INT4 and compute-bound products avoid it (bf16_dot_rate.h).
    char slow[96];
    std::snprintf(slow, sizeof slow, "avx512-bf16 (slow: %.1fx an FMA's time%s)", kernels::bf16_dot_cost_ratio(),
                  std::getenv(kernels::kBf16DotVariable) ? ", overridden" : "");
    add(true, kernels::bf16_dot_is_fast() ? "avx512-bf16" : slow);
  }
  add(isa == Isa::Avx512 && f.avx512_vnni, "avx512-vnni");
  add(isa == Isa::Avx512 && f.avx512_vnni && f.avx512_vbmi, "avx512-vbmi");
  add(isa == Isa::Avx2 && f.avx_vnni, "avx-vnni");
  if (cap()) ext += std::string(ext.empty() ? "" : "; ") + kCapVariable + "=" + std::string(isa_name(*cap()));
  const std::string name(isa_name(isa));
  return ext.empty() ? name : name + " (" + ext + ")";
}

bool has_avx512_bf16() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return avx2;
    case Isa::Avx512: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  }
  return false;
}

Isa best_isa() {
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace kimi
