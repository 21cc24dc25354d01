#pragma once
// What a forked rank of a parallel test computes and hands back to the test through a file: a
// prompt's logits at every position, then greedy tokens, each with the logits it was picked from.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/error.h"
#include "model/model.h"

namespace kimi::test {

struct GreedyTrace {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
};

inline GreedyTrace greedy_trace(Model& model, const std::vector<int32_t>& prompt, int steps) {
  KvCache cache = model.new_cache(64);
  GreedyTrace t;
  t.logits = forward_sequence(model, prompt, cache, /*all_logits=*/true);
  const int64_t V = model.config().vocab_size;
  std::vector<float> last(t.logits.end() - V, t.logits.end());
  for (int i = 0; i < steps; ++i) {
    const int32_t next = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
    t.tokens.push_back(next);
    const int32_t one[] = {next};
    last = forward_sequence(model, one, cache);
    t.logits.insert(t.logits.end(), last.begin(), last.end());
  }
  return t;
}

inline void save_trace(const std::filesystem::path& p, const GreedyTrace& t) {
  std::ofstream f(p, std::ios::binary);
  const uint64_t nl = t.logits.size(), nt = t.tokens.size();
  f.write(reinterpret_cast<const char*>(&nl), 8);
  f.write(reinterpret_cast<const char*>(t.logits.data()), std::streamsize(nl * 4));
  f.write(reinterpret_cast<const char*>(&nt), 8);
  f.write(reinterpret_cast<const char*>(t.tokens.data()), std::streamsize(nt * 4));
}

inline GreedyTrace load_trace(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  GreedyTrace t;
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  t.logits.resize(n);
  f.read(reinterpret_cast<char*>(t.logits.data()), std::streamsize(n * 4));
  f.read(reinterpret_cast<char*>(&n), 8);
  t.tokens.resize(n);
  f.read(reinterpret_cast<char*>(t.tokens.data()), std::streamsize(n * 4));
  if (!f) throw Error("cannot read " + p.string());
  return t;
}

}  // namespace kimi::test
