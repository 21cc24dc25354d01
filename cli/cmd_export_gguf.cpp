#include <chrono>
#include <cstdio>

#include "args.h"
#include "common/error.h"
#include "export/gguf_deepseek2.h"

namespace kimi::cli {

int run_export_gguf(int argc, char** argv) {
  const Args a(argc, argv, 2, {"outtype"}, {"help"});
  if (a.has("help") || a.positionals().size() != 2) {
    std::printf(
        "usage: kimi export-gguf MODEL_DIR OUT.gguf [--outtype auto|f32]\n\n"
        "Writes the checkpoint as a GGUF file of llama.cpp's deepseek2 architecture (the tensor\n"
        "names, metadata and split MLA layout of llama.cpp's converter; the tokenizer as a gpt2\n"
        "vocabulary with the kimi-k2 pre-tokenizer). BF16, F16 and F32 checkpoints; the data is\n"
        "streamed, one tensor at a time. --outtype f32 widens every matrix to F32 (exact), so that\n"
        "llama.cpp computes a BF16 checkpoint without rounding its activations to BF16.\n");
    return a.has("help") ? 0 : 1;
  }
  const std::string outtype = a.get("outtype", "auto");
  if (outtype != "auto" && outtype != "f32") throw Error("--outtype must be auto or f32");
  const auto t0 = std::chrono::steady_clock::now();
  const GgufExportResult r = export_gguf_deepseek2(a.positionals()[0], a.positionals()[1],
                                                   outtype == "f32" ? GgufOutType::F32 : GgufOutType::Same);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %zu tensors, %zu metadata keys, %.1f MB in %.1f s\n", a.positionals()[1].c_str(),
              r.num_tensors, r.num_kv, double(r.bytes) / 1e6, s);
  return 0;
}

}  // namespace kimi::cli
