// Tensor parallelism, with and without expert parallelism: the tiny model split over 2 processes
// (127.0.0.1) against 1 process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/tp_executor.h"
#include "model/model.h"
#include "model/parallel_linear.h"
#include "parallel/world.h"
#include "greedy_trace.h"
#include "parallel_ranks.h"
#include "test_util.h"

namespace kimi {
namespace {

using namespace std::chrono_literals;

constexpr int kGreedySteps = 8;
const std::vector<int32_t> kTracePrompt{5, 17, 300, 42, 1000, 7, 7, 64};

test::GreedyTrace run_trace(Model& model) { return test::greedy_trace(model, kTracePrompt, kGreedySteps); }

// A group that only has a size: enough to load a shard (binding needs no collective).
class SizeOnly final : public Communicator {
 public:
  explicit SizeOnly(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  void all_reduce_sum(std::span<float>) override { throw Error("not a real group"); }
  void all_gather(std::span<const std::byte>, std::span<std::byte>) override { throw Error("not a real group"); }
  void all_to_all(std::span<const std::byte>, std::span<const int64_t>, std::span<std::byte>,
                  std::span<const int64_t>) override {
    throw Error("not a real group");
  }
  void broadcast(std::span<std::byte>, int) override { throw Error("not a real group"); }
  void barrier() override { throw Error("not a real group"); }

 private:
  int n_;
};

// Under expert parallelism rank r of N must hold routed experts [r * E / N, (r + 1) * E / N),
// whole (all moe_intermediate_size rows), in every MoE layer; without it all E, sliced.
// Returns why not, or "".
std::string expert_placement_error(const Model& m, int rank, bool ep, int ranks) {
  const ModelConfig& c = m.config();
  const int64_t owned = ep ? c.n_routed_experts / ranks : c.n_routed_experts;
  const int64_t rows = ep ? c.moe_intermediate_size : c.moe_intermediate_size / ranks;
  for (const LayerWeights& L : m.weights().layers) {
    if (!L.moe) continue;
    if (L.moe->first_expert != (ep ? rank * owned : 0) || int64_t(L.moe->experts.size()) != owned)
      return "experts [" + std::to_string(L.moe->first_expert) + ", +" + std::to_string(L.moe->experts.size()) + ")";
    for (const MlpWeights& e : L.moe->experts)
      if (e.gate.rows != rows || e.up.rows != rows || e.down.cols != rows)
        return "an expert of " + std::to_string(e.gate.rows) + " rows, not " + std::to_string(rows);
  }
  return "";
}

// The tiny model over `ranks` ranks (forked from this test), tensor parallel with or without
// expert parallelism, against one process: the same greedy tokens, logits to float rounding.
void expect_ranks_match_one(bool expert_parallel, const QuantizationRequest& quant = {}, int ranks = 2) {
  test::TempDir dir;
  const auto model_dir = test::make_tiny_model(dir);
  test::GreedyTrace ref;
  {  // the reference, its threads gone before the ranks are forked
    Model one(model_dir, ModelOptions{.num_threads = 1, .quantization = quant});
    ref = run_trace(one);
  }
  TcpStoreServer server("127.0.0.1", 0, /*start=*/false);
  const int port = server.port();
  const auto codes = test::run_ranks(ranks, [&](int rank) {
    World w(WorldOptions{.rank = rank, .size = ranks, .store_port = port, .serve_store = false, .timeout = 30000ms,
                         .identity = "tiny|tp"});
    ModelOptions mo;  // (not designated: GCC 12 warns falsely about the string inside)
    mo.num_threads = 1;
    std::vector<int> all(size_t(ranks), 0);
    for (int r = 0; r < ranks; ++r) all[size_t(r)] = r;
    mo.tensor_parallel = w.new_group("tp", all);
    mo.expert_parallel = expert_parallel;
    mo.quantization = quant;
    Model shard(model_dir, mo);
    if (const std::string bad = expert_placement_error(shard, rank, expert_parallel, ranks); !bad.empty()) {
      std::fprintf(stderr, "rank %d holds %s\n", rank, bad.c_str());
      return 4;
    }
    test::save_trace(dir.path() / ("rank" + std::to_string(rank)), run_trace(shard));
    return 0;
  }, std::chrono::seconds(120), [&] { server.start(); });
  ASSERT_EQ(codes, std::vector<int>(size_t(ranks), 0));

  // Summing the partial products over ranks only reorders float additions, so the logits agree
  // to float rounding: 1e-4 absolute on logits of magnitude ~1, and greedy tokens exactly.
  constexpr float kTolerance = 1e-4f;
  float ref_scale = 0;
  for (float v : ref.logits) ref_scale = std::max(ref_scale, std::fabs(v));
  EXPECT_GT(ref_scale, 1e-3f) << "the reference logits are all ~0: nothing would be compared";
  for (int r = 0; r < ranks; ++r) {
    const test::GreedyTrace t = test::load_trace(dir.path() / ("rank" + std::to_string(r)));
    EXPECT_EQ(t.tokens, ref.tokens) << "rank " << r;
    ASSERT_EQ(t.logits.size(), ref.logits.size());
    float worst = 0;
    for (size_t i = 0; i < ref.logits.size(); ++i) worst = std::max(worst, std::fabs(t.logits[i] - ref.logits[i]));
    EXPECT_LE(worst, kTolerance) << "rank " << r << ": max |logit difference| " << worst << " (logits up to "
                                 << ref_scale << ")";
    std::printf("rank %d%s: max |logit - tp1 logit| = %.3g over %zu logits (max |logit| %.3g)\n", r,
                expert_parallel ? " (ep)" : "", double(worst), ref.logits.size(), double(ref_scale));
  }
}

TEST(ParallelTensor, TwoRanksGiveTheTokensAndLogitsOfOne) { expect_ranks_match_one(false); }

// --enable-expert-parallel: each rank holds 8 of the 16 experts whole and runs only those.
TEST(ParallelTensor, ExpertParallelTwoRanksGiveTheTokensAndLogitsOfOne) { expect_ranks_match_one(true); }

// tp 4 (4 processes on 2 cores): one of the tiny model's 4 heads per rank, a quarter of each MLP
// and expert's width, or 4 of the 16 experts whole under EP.
TEST(ParallelTensor, FourRanksGiveTheTokensAndLogitsOfOne) { expect_ranks_match_one(false, {}, 4); }
TEST(ParallelTensor, ExpertParallelFourRanksGiveTheTokensAndLogitsOfOne) { expect_ranks_match_one(true, {}, 4); }

// Routed experts quantized on load to int4 (groups of 32): under EP each rank holds whole int4
// experts, the same ones one process has, so tokens and logits match it; plain TP slices them.
// (Whole experts never meet row_parallel's group check: RowParallelSliceKeepsWholeQuantizationGroups.)
TEST(ParallelTensor, ExpertParallelKeepsQuantizedExpertsWhole) {
  const QuantizationRequest int4 = QuantizationRequest::parse("int4");
  {
    test::TempDir dir;
    const auto model_dir = test::make_tiny_model(dir);
    ModelOptions mo;
    mo.num_threads = 1;
    mo.quantization = int4;
    mo.tensor_parallel = std::make_shared<SizeOnly>(2);  // loading needs no collective
    const int64_t width = ModelConfig::load(model_dir).moe_intermediate_size;
    for (bool ep : {false, true}) {
      mo.expert_parallel = ep;
      Model m(model_dir, mo);
      const MoeWeights& moe = *m.weights().layers.back().moe;
      EXPECT_EQ(moe.experts.at(0).down.format, WeightFormat::Int4Group);
      EXPECT_EQ(moe.experts.at(0).down.cols, ep ? width : width / 2) << "ep " << ep;
      EXPECT_EQ(moe.shared->down.cols, width / 2) << "the shared expert stays sliced, ep " << ep;
    }
  }
  expect_ranks_match_one(true, int4);
}

// Through the engine: three prompts batched, the longer ones prefilled in chunks of 8 tokens,
// rank 0 driving the scheduler and the worker running the steps it broadcasts.
std::vector<std::vector<int32_t>> engine_tokens(Model& model) {
  EngineConfig ec;
  ec.scheduler.max_num_seqs = 4;
  ec.scheduler.max_num_batched_tokens = 8;
  ec.scheduler.max_model_len = 256;
  ec.num_kv_blocks_override = 64;
  Engine engine(model, nullptr, ec);
  std::vector<std::vector<int32_t>> prompts{{5, 17, 300, 42, 1000, 7, 7, 64, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
                                            {3, 1, 4, 1, 5},
                                            {900, 800, 700, 600, 500, 400, 300, 200, 100, 50, 25, 12, 6}};
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 6;
  sp.ignore_eos = true;
  std::vector<std::vector<int32_t>> out;
  for (const auto& c : engine.generate(prompts, sp)) out.push_back(c.at(0).token_ids);
  return out;
}

void expect_engine_on_two_ranks_matches_one(bool expert_parallel) {
  test::TempDir dir;
  const auto model_dir = test::make_tiny_model(dir);
  std::vector<std::vector<int32_t>> ref;
  {
    Model one(model_dir, ModelOptions{.num_threads = 1});
    ref = engine_tokens(one);
  }
  ASSERT_EQ(ref.size(), 3u);
  for (const auto& r : ref) ASSERT_EQ(r.size(), 6u);
  TcpStoreServer server("127.0.0.1", 0, /*start=*/false);
  const int port = server.port();
  const auto codes = test::run_ranks(2, [&](int rank) {
    World w(WorldOptions{.rank = rank, .size = 2, .store_port = port, .serve_store = false, .timeout = 30000ms,
                         .identity = "tiny|tp=2"});
    ModelOptions mo;
    mo.num_threads = 1;
    mo.tensor_parallel = w.new_group("tp", {0, 1});
    mo.expert_parallel = expert_parallel;
    Model shard(model_dir, mo);
    if (rank != 0) {
      run_tensor_parallel_worker(shard);
      return 0;
    }
    const auto got = engine_tokens(shard);
    return got == ref ? 0 : 3;
  }, std::chrono::seconds(120), [&] { server.start(); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(ParallelTensor, EngineBatchedChunkedPrefillGivesTheTokensOfOneProcess) {
  expect_engine_on_two_ranks_matches_one(false);
}

TEST(ParallelTensor, ExpertParallelEngineBatchedChunkedPrefillGivesTheTokensOfOneProcess) {
  expect_engine_on_two_ranks_matches_one(true);
}

// The split must divide heads and widths; a group of 3 cannot split the tiny model's 4 heads.
TEST(ParallelTensor, SizeThatDoesNotDivideTheHeadsIsRefused) {
  test::TempDir dir;
  const auto model_dir = test::make_tiny_model(dir);
  auto three = std::make_shared<SizeOnly>(3);
  try {
    Model m(model_dir, ModelOptions{.num_threads = 1, .tensor_parallel = three});
    FAIL() << "loaded 4 heads over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide num_attention_heads"), std::string::npos) << e.what();
  }
}

// Expert parallelism deals whole experts out evenly: 6 experts cannot go to 4 ranks (4 divides
// the tiny model's heads and widths, so the expert count is what refuses it), at start-up,
// before a tensor is bound; without expert parallelism the same size passes that check.
TEST(ParallelTensor, ExpertParallelSizeThatDoesNotDivideTheExpertsIsRefused) {
  test::TempDir dir;
  const auto model_dir = test::make_tiny_model(dir);
  nlohmann::json cfg;
  {
    std::ifstream f(model_dir / "config.json");
    f >> cfg;
  }
  nlohmann::json& text = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  text["n_routed_experts"] = 6;
  text["n_group"] = 1;
  text["topk_group"] = 1;
  std::ofstream(model_dir / "config.json") << cfg.dump();
  const ModelConfig c = ModelConfig::load(model_dir);
  ASSERT_EQ(c.n_routed_experts, 6);
  auto four = std::make_shared<SizeOnly>(4);
  EXPECT_NO_THROW(TensorParallel{four.get()}.check(c));
  try {
    ModelOptions mo;
    mo.num_threads = 1;
    mo.tensor_parallel = four;
    mo.expert_parallel = true;
    Model m(model_dir, mo);
    FAIL() << "dealt 6 experts out to 4 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert parallel size 4 does not divide n_routed_experts (6)"),
              std::string::npos)
        << e.what();
  }
  // The ranges themselves: rank r of 2 holds [8r, 8r + 8) of 16.
  ModelConfig sixteen = c;
  sixteen.n_routed_experts = 16;
  auto two = std::make_shared<SizeOnly>(2);
  const ExpertRange r0 = TensorParallel{two.get(), true}.experts(sixteen);
  EXPECT_EQ(r0.first, 0);
  EXPECT_EQ(r0.count, 8);
  const ExpertRange all = TensorParallel{two.get(), false}.experts(sixteen);
  EXPECT_EQ(all.first, 0);
  EXPECT_EQ(all.count, 16);
}

TEST(ParallelTensor, RowParallelSliceKeepsWholeQuantizationGroups) {
  // A [2, 128] int8 matrix in groups of 64: 2 ranks get one group each, 4 ranks would split one.
  std::vector<int8_t> q(256);
  for (size_t i = 0; i < q.size(); ++i) q[i] = int8_t(i % 100);
  std::vector<float> scales{1, 2, 3, 4};  // [2 rows, 2 groups]
  WeightMatrix w{.dtype = DType::F32, .data = q.data(), .rows = 2, .cols = 128, .format = WeightFormat::Int8Group,
                 .scales = scales.data(), .scale_dtype = DType::F32, .group_size = 64};
  auto two = std::make_shared<SizeOnly>(2);
  OwnedWeightBuffers owned;
  const WeightMatrix s = row_parallel(w, TensorParallel{two.get()}, owned);  // rank 0: columns 0..63
  ASSERT_EQ(s.cols, 64);
  EXPECT_EQ(static_cast<const int8_t*>(s.data)[64 + 1], q[128 + 1]);  // row 1, column 1
  EXPECT_EQ(static_cast<const float*>(s.scales)[1], 3.0f);            // row 1, group 0
  auto four = std::make_shared<SizeOnly>(4);
  EXPECT_THROW(row_parallel(w, TensorParallel{four.get()}, owned), Error);
  // Under expert parallelism a routed expert is not sliced at all, so no group is split.
  const WeightMatrix whole = row_parallel(w, TensorParallel{four.get(), true}.routed_expert_split(), owned);
  EXPECT_EQ(whole.cols, 128);
  EXPECT_EQ(whole.data, w.data);
}

}  // namespace
}  // namespace kimi
