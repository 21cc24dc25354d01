// `kimi bench structured`: what structured outputs cost. Compile time of every schema of a
// corpus; the token-mask cost per decode step at 1 and 32 sequences (each sequence under its
// own schema, a seeded random walk through allowed tokens, so that the masks' state cache sees
// what it would see in serving); and, beside them, the engine's decode step at the same batch
// sizes on the same model, so the overhead reads as a fraction of a step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "args.h"
#include "common/error.h"
#include "common/rng.h"
#include "engine/engine.h"
#include "structured/compile.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace kimi::cli {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Average engine step (ms) of `seqs` unconstrained decodes, prefill excluded.
double decode_step_ms(Model& model, const Tokenizer& tok, int64_t seqs, int64_t steps) {
  EngineConfig c;
  c.scheduler.max_model_len = 256;
  c.scheduler.max_num_seqs = seqs;
  c.scheduler.max_num_batched_tokens = 4096;
  c.kv_cache_bytes = size_t(seqs * 256 / 16 + 16) * KvStorage::bytes_per_block(model.config(), 16);
  Engine engine(model, &tok, c);
  SamplingParams p;
  p.max_tokens = steps + 1;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = tok.encode("Structured outputs benchmark prompt, sixteen tokens or so long.", false);
  for (int64_t i = 0; i < seqs; ++i) engine.add_request(std::to_string(i), prompt, p);
  engine.step();  // prefill (and the first token)
  const auto t0 = Clock::now();
  int64_t n = 0;
  while (engine.has_unfinished()) {
    engine.step();
    ++n;
  }
  return n ? ms_since(t0) / double(n) : 0;
}

}  // namespace

int run_bench_structured(int argc, char** argv) {
  const Args a(argc, argv, 3, {"model", "schemas", "steps", "threads", "seed"}, {"help"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi bench structured --model DIR [--schemas tests/data/structured_schemas.json] [--steps 64]\n"
        "                             [--threads N] [--seed 0]\n\n"
        "Prints the compile time of every schema of the corpus, the token-mask cost per decode step\n"
        "at 1 and 32 sequences, and the engine's decode step at the same batch sizes.\n");
    return 0;
  }
  const std::string dir = a.require("model");
  ModelOptions mo;
  mo.num_threads = int(a.get_int("threads", 0));
  Model model(dir, mo);
  const Tokenizer tok = Tokenizer::load(dir);
  const int64_t steps = a.get_int("steps", 64);
  Rng rng(uint64_t(a.get_int("seed", 0)));
  std::ifstream f(a.get("schemas", "tests/data/structured_schemas.json"));
  if (!f) throw Error("cannot read the schema corpus (--schemas)");
  const auto corpus = nlohmann::ordered_json::parse(f);

  std::printf("compile time per schema (median of 5)\n");
  std::vector<structured::StructuredSpec> specs;
  std::vector<double> all;
  for (const auto& e : corpus) {
    structured::StructuredSpec spec{structured::SpecKind::JsonSchema, e["schema"].dump()};
    std::vector<double> t;
    size_t elems = 0;
    for (int k = 0; k < 5; ++k) {
      const auto t0 = Clock::now();
      elems = structured::compile(spec)->grammar().elems.size();
      t.push_back(ms_since(t0));
    }
    std::sort(t.begin(), t.end());
    all.push_back(t[2]);
    std::printf("  %-24s %7zu elements  %8.3f ms\n", e["name"].get<std::string>().c_str(), elems, t[2]);
    specs.push_back(spec);
  }
  std::sort(all.begin(), all.end());
  std::printf("  median %.3f ms, max %.3f ms over %zu schemas\n\n", all[all.size() / 2], all.back(), all.size());

  const auto vocab = structured::TokenVocab::from_tokenizer(tok, model.config().vocab_size);
  std::vector<int32_t> ends;
  for (int64_t id : model.config().eos_token_ids) ends.push_back(int32_t(id));
  std::printf("token masks (vocabulary %lld, trie %zu nodes), %lld steps\n", (long long)vocab->size(),
              vocab->nodes().size(), (long long)steps);
  for (int64_t seqs : {int64_t(1), int64_t(32)}) {
    std::vector<std::unique_ptr<structured::GrammarMatcher>> m;
    for (int64_t i = 0; i < seqs; ++i)
      m.push_back(std::make_unique<structured::GrammarMatcher>(structured::compile(specs[rng.next_u64() % specs.size()]), vocab, ends));
    double mask_ms = 0;
    int64_t measured = 0;
    std::vector<int32_t> allowed;
    for (int64_t s = 0; s < steps; ++s) {
      bool any = false;
      for (auto& g : m) {
        if (g->finished()) {  // a finished sequence is replaced by a fresh one, as in serving
          g = std::make_unique<structured::GrammarMatcher>(structured::compile(specs[rng.next_u64() % specs.size()]), vocab, ends);
        }
        const auto t0 = Clock::now();
        const std::vector<uint64_t>& mask = g->mask();
        mask_ms += ms_since(t0);
        allowed.clear();
        for (int32_t id = 0; id < vocab->size(); ++id)
          if ((mask[size_t(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
        g->accept_token(allowed[rng.next_u64() % allowed.size()]);
        any = true;
      }
      measured += any;
    }
    size_t hits = 0, misses = 0;
    for (auto& g : m) hits += g->cache_hits(), misses += g->cache_misses();
    const double per_step = mask_ms / double(std::max<int64_t>(measured, 1));
    const double step = decode_step_ms(model, tok, seqs, std::min<int64_t>(steps, 32));
    std::printf("  %2lld sequences: masks %.3f ms per step (state cache of the last matchers: %zu hits, %zu misses); "
                "decode step %.3f ms; masks = %.1f%% of a step\n",
                (long long)seqs, per_step, hits, misses, step, step > 0 ? 100.0 * per_step / step : 0.0);
  }
  return 0;
}

}  // namespace kimi::cli
