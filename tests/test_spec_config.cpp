// --speculative-config parsing and the n-gram lookup: vLLM's keys and defaults, a clear error for
// every bad value, and the lookup's choice of match.
#include <gtest/gtest.h>

#include "common/error.h"
#include "spec/ngram_proposer.h"
#include "spec/spec_config.h"
#include "test_util.h"

namespace kimi::spec {
namespace {

TEST(SpecConfig, ParsesVllmsKeys) {
  EXPECT_FALSE(parse_speculative_config("").enabled());
  const SpeculativeConfig e = parse_speculative_config(R"({"method":"eagle3","model":"/d","num_speculative_tokens":3})");
  EXPECT_EQ(e.method, Method::Eagle3);
  EXPECT_EQ(e.model, "/d");
  EXPECT_EQ(e.num_speculative_tokens, 3);
  const SpeculativeConfig n = parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":4})");
  EXPECT_EQ(n.method, Method::Ngram);
  EXPECT_EQ(n.prompt_lookup_min, 5);
  EXPECT_EQ(n.prompt_lookup_max, 5);
  const SpeculativeConfig m = parse_speculative_config(
      R"({"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3,"disable_by_batch_size":8,"draft_tensor_parallel_size":1})");
  EXPECT_EQ(m.prompt_lookup_max, 3);
  EXPECT_EQ(m.prompt_lookup_min, 3);
  EXPECT_EQ(m.disable_by_batch_size, 8);
  EXPECT_EQ(parse_speculative_config(R"({"method":"deepseek_mtp","num_speculative_tokens":1})").method, Method::Mtp);
}

TEST(SpecConfig, DisableByBatchSizeDefaultsByMethod) {
  // Draft models pause above one sequence, n-gram lookup never (the measured crossovers); a given
  // value, 0 included, wins.
  EXPECT_EQ(parse_speculative_config(R"({"method":"eagle3","model":"/d","num_speculative_tokens":3})").disable_by_batch_size, 1);
  EXPECT_EQ(parse_speculative_config(R"({"method":"mtp","num_speculative_tokens":1})").disable_by_batch_size, 1);
  EXPECT_EQ(parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":3})").disable_by_batch_size, 0);
  EXPECT_EQ(parse_speculative_config(R"({"method":"eagle3","model":"/d","num_speculative_tokens":3,"disable_by_batch_size":0})")
                .disable_by_batch_size, 0);
  EXPECT_EQ(parse_speculative_config(R"({"method":"mtp","num_speculative_tokens":1,"disable_by_batch_size":4})")
                .disable_by_batch_size, 4);
}

TEST(SpecConfig, BadConfigsAreClearErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"[1]", "must be a JSON object"},
      {R"({"method":"eagle3","model":"/d","num_speculative_tokens":3,"speculative_tokens":1})", "unknown key 'speculative_tokens'"},
      {R"({"method":"medusa","num_speculative_tokens":3})", "unknown method 'medusa'"},
      {R"({"num_speculative_tokens":3})", "'method' is required"},
      {R"({"method":"eagle3","num_speculative_tokens":3})", "needs 'model'"},
      {R"({"method":"ngram","model":"/d","num_speculative_tokens":3})", "takes no 'model'"},
      {R"({"method":"ngram"})", "'num_speculative_tokens' is required"},
      {R"({"method":"ngram","num_speculative_tokens":0})", "'num_speculative_tokens' must be in [1, 16]"},
      {R"({"method":"ngram","num_speculative_tokens":"3"})", "must be an integer"},
      {R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":4,"prompt_lookup_max":2})", "exceeds"},
      {R"({"method":"eagle3","model":"/d","num_speculative_tokens":3,"prompt_lookup_max":2})", "ngram only"},
      {R"({"method":"ngram","num_speculative_tokens":3,"draft_tensor_parallel_size":2})", "must be 1"},
  };
  for (const auto& [text, message] : cases)
    EXPECT_NE(test::error_of([&] { parse_speculative_config(text); }).find(message), std::string::npos) << text;
}

TEST(SpecConfig, TargetChecks) {
  ModelConfig target;
  target.num_nextn_predict_layers = 0;
  EXPECT_NE(test::error_of([&] {
              check_against_target(parse_speculative_config(R"({"method":"mtp","num_speculative_tokens":1})"), target);
            }).find("needs a checkpoint with an MTP layer"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              check_against_target(
                  parse_speculative_config(R"({"method":"eagle3","model":"/no/such/draft","num_speculative_tokens":1})"),
                  target);
            }).find("does not exist"),
            std::string::npos);
  EXPECT_NO_THROW(check_against_target(parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":1})"), target));
}

TEST(NgramLookup, ProposesWhatFollowedTheLongestLatestMatch) {
  using V = std::vector<int32_t>;
  // "1 2 3" occurs at 0 and 5: the later occurrence (followed by 9 9) wins for n = 3.
  EXPECT_EQ(ngram_lookup(V{1, 2, 3, 4, 5, 1, 2, 3, 9, 9, 7, 1, 2, 3}, 1, 3, 2), (V{9, 9}));
  // A longer match beats a later shorter one: "7 1 2 3" (n = 4) occurs only at 2..5.
  EXPECT_EQ(ngram_lookup(V{0, 0, 7, 1, 2, 3, 4, 4, 1, 2, 3, 5, 7, 1, 2, 3}, 1, 4, 3), (V{4, 4, 1}));
  // A short period: the latest occurrence followed by all the drafts, not the very latest.
  EXPECT_EQ(ngram_lookup(V{9, 9, 9, 9, 9, 9}, 1, 2, 3), (V{9, 9, 9}));
  EXPECT_EQ(ngram_lookup(V{4, 8, 4, 8, 4, 8, 4, 8}, 1, 2, 3), (V{4, 8, 4}));
  // The proposal stops at the sequence's end.
  EXPECT_EQ(ngram_lookup(V{5, 6, 5, 6}, 1, 2, 4), (V{5, 6}));
  // Nothing below min_n, nothing without an earlier occurrence, nothing for no drafts.
  EXPECT_EQ(ngram_lookup(V{1, 2, 3, 4, 3}, 2, 3, 2), V{});
  EXPECT_EQ(ngram_lookup(V{1, 2, 3, 4, 3}, 1, 3, 2), (V{4, 3}));
  EXPECT_EQ(ngram_lookup(V{1, 2, 3}, 1, 3, 2), V{});
  EXPECT_EQ(ngram_lookup(V{1, 1}, 1, 3, 0), V{});
  EXPECT_EQ(ngram_lookup(V{7}, 1, 3, 2), V{});
}

}  // namespace
}  // namespace kimi::spec
