// Regression tests for defects the libFuzzer targets (fuzz/) found, each reduced from the
// fuzzer's reproducer, so that they stay fixed in the ordinary test runs.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "format/model_config.h"
#include "format/quantization_config.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/pretokenizer.h"

namespace kimi {
namespace {

// fuzz_tokenizer: the ASCII fast path read the byte after a text ending in letters and an
// apostrophe ("E'") to test for a contraction. Only ASan sees it, and only when the text is
// not a std::string (whose terminating NUL hides the read): here, a buffer of exactly its size.
TEST(FuzzRegressions, PreTokenizerStopsAtATrailingApostrophe) {
  const PreTokenizer pt;
  for (const std::string_view s : {"E'", "abc'", "I'r", "we'l", "x'R"}) {
    const auto buf = std::make_unique<char[]>(s.size());
    std::copy(s.begin(), s.end(), buf.get());
    const std::string_view exact(buf.get(), s.size());
    std::string joined;
    for (std::string_view piece : pt.split(exact)) joined += piece;
    EXPECT_EQ(joined, s);
  }
  const auto a = pt.split("E'");
  ASSERT_EQ(a.size(), 2u);  // the letters, then the lone apostrophe
  EXPECT_EQ(a[0], "E");
}

std::string render_error(const std::string& source, jinja::Options o) {
  try {
    jinja::Template(source, o).render(nlohmann::ordered_json::object());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// fuzz_jinja: nested loops over large ranges, or a macro calling itself twice per level, ran
// for hours (2^60 calls) within the recursion bound; now a render has a work budget.
TEST(FuzzRegressions, JinjaRenderHasAWorkBudget) {
  jinja::Options o;
  o.max_render_steps = 100'000;
  EXPECT_NE(render_error("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", o)
                .find("too much work"),
            std::string::npos);
  EXPECT_NE(render_error("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
                         o)
                .find("too much work"),
            std::string::npos);
  // A loop filter iterates too.
  EXPECT_NE(render_error("{% for i in range(1000000) if i < 0 %}{% endfor %}", o).find("too much work"),
            std::string::npos);
  // Within the budget, the same templates work.
  EXPECT_EQ(render_error("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", o), "");
  // The default budget is far above what chat templates need, and still bounded.
  EXPECT_GE(jinja::Options().max_render_steps, 10'000'000);
}

TEST(FuzzRegressions, JinjaRenderHasAnOutputBound) {
  jinja::Options o;
  o.max_output_bytes = 10'000;
  EXPECT_NE(render_error("{% for i in range(100) %}{{ 'x' * 1000 }}{% endfor %}", o).find("output is too large"),
            std::string::npos);
  EXPECT_NE(render_error("{% set s %}{% for i in range(100) %}{{ 'x' * 1000 }}{% endfor %}{% endset %}", o)
                .find("output is too large"),
            std::string::npos);
  EXPECT_EQ(render_error("{% for i in range(9) %}{{ 'x' * 1000 }}{% endfor %}", o), "");
}

// fuzz_config: a config.json with a non-string architecture threw nlohmann's type_error (not
// kimi::Error, so callers reporting bad files crashed instead); absurd sizes overflowed int64 in
// qk_head_dim(), and absurd rope_scaling gave an infinite attention scale, all accepted.
nlohmann::json small_config() {
  return {{"vocab_size", 1000}, {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
          {"num_attention_heads", 4}, {"kv_lora_rank", 16}, {"qk_nope_head_dim", 8}, {"qk_rope_head_dim", 4},
          {"v_head_dim", 8}};
}

TEST(FuzzRegressions, ConfigReaderRejectsWithItsOwnError) {
  EXPECT_NO_THROW(ModelConfig::from_json(small_config()));
  auto j = small_config();
  j["architectures"] = {1};
  EXPECT_THROW(ModelConfig::from_json(j), Error);
  j = small_config();
  j["qk_nope_head_dim"] = INT64_MAX;
  EXPECT_THROW(ModelConfig::from_json(j), Error);
  j = small_config();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 1e300}, {"mscale_all_dim", 1e300}};
  EXPECT_THROW(ModelConfig::from_json(j), Error);
  j = small_config();
  j["rope_theta"] = 0;
  EXPECT_THROW(ModelConfig::from_json(j), Error);
}

// fuzz_config: quantization_config's num_bits / group_size went through nlohmann's value<int>(),
// which converts silently: a float out of int's range was undefined behaviour (UBSan), and
// num_bits 4294967300 was read as 4 and accepted.
TEST(FuzzRegressions, QuantizationConfigIntegersAreChecked) {
  const nlohmann::json good = CompressedTensorsConfig::kimi_k25_int4_json();
  EXPECT_NO_THROW(CompressedTensorsConfig::parse(good, "config.json"));
  auto with_weights = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json q = good;
    for (auto& [name, group] : q["config_groups"].items()) group["weights"][key] = v;
    return q;
  };
  for (const nlohmann::json& bad : {nlohmann::json(7.7e52), nlohmann::json(4294967300LL), nlohmann::json(4.0),
                                    nlohmann::json(18446744073709551615ULL), nlohmann::json("4")}) {
    EXPECT_THROW(CompressedTensorsConfig::parse(with_weights("num_bits", bad), "config.json"), Error) << bad.dump();
    EXPECT_THROW(CompressedTensorsConfig::parse(with_weights("group_size", bad), "config.json"), Error) << bad.dump();
  }
}

// fuzz_config (a hang): a checkpoint's "re:" pattern with nested quantifiers (".**x") made
// std::regex backtrack for hours on a module name; patterns now run on PCRE2 with a match limit.
TEST(FuzzRegressions, QuantizationPatternsCannotBacktrackForever) {
  nlohmann::json q = CompressedTensorsConfig::kimi_k25_int4_json();
  q["ignore"] = {"lm_head", "re:(.*)*(.*)*(.*)*(.*)*(.*)*x"};
  const auto c = CompressedTensorsConfig::parse(q, "config.json");
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)c.scheme_for(std::string(200, 'J') + "." + std::string(200, ':'));
  } catch (const Error&) {  // too much backtracking is an error, not a hang
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  // Real patterns behave as before: whole-name matches.
  q["ignore"] = {"lm_head", "re:.*self_attn.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"};
  const auto k = CompressedTensorsConfig::parse(q, "config.json");
  EXPECT_FALSE(k.scheme_for("language_model.model.layers.3.self_attn.q_a_proj"));
  EXPECT_FALSE(k.scheme_for("language_model.model.layers.0.mlp.gate_proj"));
  EXPECT_TRUE(k.scheme_for("language_model.model.layers.3.mlp.experts.7.up_proj"));
}

}  // namespace
}  // namespace kimi
