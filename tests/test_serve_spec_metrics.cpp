// bench serve's reading of the server's spec_decode counters: kimi: and vllm: names, with or
// without _total, per position; and the run's delta (acceptance rate and length).
#include <gtest/gtest.h>

#include "bench/serve_spec_metrics.h"

namespace kimi {
namespace {

TEST(ServeSpecMetrics, ParsesCountersAndTheRunsDelta) {
  EXPECT_FALSE(parse_spec_decode_counters("# HELP kimi:prompt_tokens_total x\nkimi:prompt_tokens_total{model_name=\"m\"} 5\n"));
  const std::string before =
      "# TYPE kimi:spec_decode_num_drafts_total counter\n"
      "kimi:spec_decode_num_drafts_total{model_name=\"m\"} 10\n"
      "kimi:spec_decode_num_draft_tokens_total{model_name=\"m\"} 30\n"
      "kimi:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 12\n"
      "kimi:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 7\n"
      "kimi:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"1\"} 4\n"
      "kimi:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"2\"} 1\n";
  // vLLM's spelling (no _total on some exporters) reads the same.
  const std::string after =
      "vllm:spec_decode_num_drafts{model_name=\"m\"} 30\n"
      "vllm:spec_decode_num_draft_tokens{model_name=\"m\"} 90\n"
      "vllm:spec_decode_num_accepted_tokens{model_name=\"m\"} 52\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos{model_name=\"m\",position=\"0\"} 25\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos{model_name=\"m\",position=\"1\"} 17\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos{model_name=\"m\",position=\"2\"} 10\n";
  const auto b = parse_spec_decode_counters(before), a = parse_spec_decode_counters(after);
  ASSERT_TRUE(b && a);
  EXPECT_EQ(b->drafts, 10);
  ASSERT_EQ(b->accepted_per_pos.size(), 3u);
  const SpecDecodeStats s = spec_decode_delta(*b, *a);
  EXPECT_EQ(s.drafts, 20);
  EXPECT_EQ(s.draft_tokens, 60);
  EXPECT_EQ(s.accepted_tokens, 40);
  EXPECT_DOUBLE_EQ(s.acceptance_rate, 40.0 / 60.0);
  EXPECT_DOUBLE_EQ(s.acceptance_length, 3.0);
  ASSERT_EQ(s.per_position_rate.size(), 3u);
  EXPECT_DOUBLE_EQ(s.per_position_rate[0], 18.0 / 20.0);
  EXPECT_DOUBLE_EQ(s.per_position_rate[2], 9.0 / 20.0);
  const std::string text = format_spec_decode_stats(s);
  EXPECT_NE(text.find("Acceptance length:"), std::string::npos);
  EXPECT_NE(text.find("3.00"), std::string::npos);
}

}  // namespace
}  // namespace kimi
