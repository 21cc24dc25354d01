#include "bench/speculative_steps.h"

#include <algorithm>
#include <chrono>

#include "spec/proposer_factory.h"

namespace kimi {

namespace {

constexpr int kRepeats = 15;  // the median of this many: single steps are short and noisy

// The median of kRepeats timings of f, each right after an untimed call of before.
template <class Before, class F>
double median_seconds(Before&& before, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < kRepeats; ++i) {
    before();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + kRepeats / 2, t.end());
  return t[kRepeats / 2];
}

}  // namespace

void measure_speculative_steps(Model& model, const spec::SpeculativeConfig& config, const std::vector<int32_t>& prompt,
                               const LatencyOptions& o, LatencyResult& r) {
  SpeculativeFigures& f = r.speculative;
  const ModelConfig& c = model.config();
  const int64_t k = config.num_speculative_tokens, ctx = int64_t(prompt.size());
  // The target's steps, at the end of the prompt: each overwrites the same rows after it.
  KvCache cache(c, ctx + k + 1, o.kv_cache_dtype);
  forward_sequence(model, std::span<const int32_t>(prompt).first(size_t(ctx - 1)), cache);
  const std::vector<int32_t> step(prompt.end() - 1, prompt.end());
  std::vector<int32_t> verify = step;
  for (int64_t j = 0; j < k; ++j) verify.push_back(prompt[size_t(j % ctx)]);
  auto run = [&](const std::vector<int32_t>& tokens) {
    ForwardBatch fb;
    fb.seqs.push_back({.tokens = tokens, .kv = cache.view(), .num_logits = int64_t(tokens.size())});
    model.forward(fb);
  };

  // The proposer for one sequence, its block table covering the prompt and k drafts past it.
  const int64_t block_size = 16, blocks = (ctx + k + block_size) / block_size + 1;
  const std::unique_ptr<spec::Proposer> proposer = spec::make_proposer(config, model, blocks, block_size, o.kv_cache_dtype);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[size_t(b)] = int32_t(b);
  const std::vector<int64_t> layers = proposer->capture_layers();
  spec::ProposeRequest req;
  req.request_id = "bench";
  req.tokens = prompt;
  req.block_ids = table;
  std::vector<std::vector<int32_t>> drafts;
  std::vector<float> hidden;
  // Sets up the proposer's call that takes in `positions` new positions and drafts num_drafts
  // tokens (in req and hidden, shared: one set-up at a time), and returns that call. One draft
  // token: a draft model runs one position; n-gram scans the prompt.
  auto proposal = [&](int64_t positions, int64_t num_drafts) {
    hidden.assign(layers.size() * size_t(positions * c.hidden_size), 0.01f);
    req.first_position = ctx - 1 - positions;
    req.num_positions = positions;
    req.num_drafts = num_drafts;
    req.hidden_states = hidden;
    return [&] { proposer->propose({&req, 1}, drafts); };
  };
  // Each step is timed where decoding runs it: plain steps after plain steps, a verification after
  // the proposer's call, the proposer after a verification (whose reads take the draft's weights
  // out of L2: timed back to back instead, a draft step of the mini pair took half the time).
  f.plain_step_seconds = median_seconds([] {}, [&] { run(step); });
  f.verify_step_seconds = median_seconds(proposal(1, k), [&] { run(verify); });
  const auto after_verify = [&](int64_t positions, int64_t num_drafts) {
    return median_seconds([&] { run(verify); }, proposal(positions, num_drafts));
  };
  // One new position, then all k + 1 of a verification step whose drafts all passed; the chain's
  // later drafts as the extra time of k drafts over one.
  f.draft_step_seconds = after_verify(1, 1);
  f.catch_up_step_seconds = after_verify(std::min<int64_t>(k + 1, ctx - 1), 1);
  f.chain_step_seconds =
      k > 1 ? std::max(0.0, (after_verify(1, k) - f.draft_step_seconds) / double(k - 1)) : f.draft_step_seconds;

  // A step with drafts verifies them, then the proposer takes in the 1 + a verified positions and
  // drafts k tokens: its first draft costs about draft + a / k x (catch-up - draft) (a model
  // proposer's work grows by one row's KV per position), the others one chain step each. The
  // steps without drafts (no proposal, e.g. no n-gram match) are plain steps that asked the
  // proposer once. output_len decode tokens came out of them. Counts are over num_prompts
  // prompts; the prediction is per prompt, as r.decode_seconds.
  const double mean_accepted = f.drafts > 0 ? double(f.accepted) / double(f.drafts) : 0.0;
  const double first_call =
      f.draft_step_seconds + (k > 0 ? mean_accepted / double(k) : 0.0) * (f.catch_up_step_seconds - f.draft_step_seconds);
  const int64_t from_drafts = f.drafts + f.accepted;
  const int64_t plain_steps = std::max<int64_t>(0, o.output_len * o.num_prompts - from_drafts);
  f.predicted_decode_seconds =
      (double(f.drafts) * (f.verify_step_seconds + first_call + double(k - 1) * f.chain_step_seconds) +
       double(plain_steps) * (f.plain_step_seconds + f.draft_step_seconds)) /
      double(o.num_prompts);
}

}  // namespace kimi
