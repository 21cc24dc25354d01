// The `kimi` binary end to end: make-model, generate, bench latency, and its errors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace kimi {
namespace {

TEST(Cli, MakeModelThenGenerateGreedily) {
  test::TempDir d;
  const std::string dir = (d.path() / "m").string();
  test::CmdResult r = test::run_kimi("make-model " + dir + " --preset tiny");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("139 tensors"), std::string::npos) << r.out;

  r = test::run_kimi("generate --model " + dir + " --prompt-ids 17,923,4,511 --max-tokens 6 --ignore-eos --threads 2");
  ASSERT_EQ(r.status, 0) << r.out;
  std::istringstream first_line(r.out.substr(0, r.out.find('\n')));
  std::vector<int> ids;
  for (int x; first_line >> x;) ids.push_back(x);
  EXPECT_EQ(ids.size(), 6u) << r.out;
  // Greedy is deterministic, and the same whichever attention form decodes.
  const test::CmdResult again = test::run_kimi("generate --model " + dir + " --prompt-ids 17,923,4,511 --max-tokens 6 --ignore-eos --attention naive");
  EXPECT_EQ(again.out.substr(0, again.out.find('\n')), r.out.substr(0, r.out.find('\n')));

  // --json (what bench/llama_cpp_compare reads): the same ids, the thread count and the timings;
  // --warmup changes nothing but the timing.
  const test::CmdResult js = test::run_kimi("generate --model " + dir +
                           " --prompt-ids 17,923,4,511 --max-tokens 6 --ignore-eos --threads 2 --warmup --json");
  ASSERT_EQ(js.status, 0) << js.out;
  const nlohmann::json j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j.at("tokens").get<std::vector<int>>(), ids);
  EXPECT_EQ(j.at("prompt_tokens").get<int>(), 4);
  EXPECT_EQ(j.at("threads").get<int>(), 2);
  EXPECT_GT(j.at("prefill_seconds").get<double>(), 0.0);
  EXPECT_GE(j.at("decode_seconds").get<double>(), 0.0);
}

TEST(Cli, TextInTextOut) {
  test::TempDir d;
  const std::string dir = (d.path() / "m").string();
  ASSERT_EQ(test::run_kimi("make-model " + dir).status, 0);
  // make-model ships a tokenizer and a chat template, so the model takes text end to end.
  test::CmdResult r = test::run_kimi("generate --model " + dir + " --prompt 'The GNU General Public License' --max-tokens 5 --ignore-eos");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("generated: 5 tokens"), std::string::npos) << r.out;
  r = test::run_kimi("tokenize --model " + dir + " --text 'Hello world'");
  ASSERT_EQ(r.status, 0) << r.out;
  r = test::run_kimi("chat --model " + dir + " --max-tokens 4 --no-thinking < /dev/null");
  EXPECT_EQ(r.status, 0) << r.out;
  const std::string script = (d.path() / "in.txt").string();
  std::ofstream(script) << "Hello there\n/reset\nAgain\n";
  r = test::run_kimi("chat --model " + dir + " --max-tokens 4 --temperature 0 < " + script);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("(conversation reset)"), std::string::npos) << r.out;
}

TEST(Cli, BenchLatencyReportsRooflineFractions) {
  test::TempDir d;
  const std::string dir = (d.path() / "m").string();
  ASSERT_EQ(test::run_kimi("make-model " + dir).status, 0);
  const test::CmdResult r = test::run_kimi("bench latency --model " + dir + " --input-len 16 --output-len 4 --num-iters 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("decode:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of roofline"), std::string::npos) << r.out;
  // The KV cache kimi serve runs by default (auto: bfloat16; the tiny preset's 3 layers x 40
  // values x 2 bytes a token).
  EXPECT_NE(r.out.find("KV cache: bfloat16, 240 bytes per token"), std::string::npos) << r.out;
}

TEST(Cli, BenchLatencyComparesQuantizationsInOneRun) {
  test::TempDir d;
  const std::string dir = (d.path() / "m").string();
  ASSERT_EQ(test::run_kimi("make-model " + dir).status, 0);
  const test::CmdResult r =
      test::run_kimi("bench latency --model " + dir + " --input-len 8 --output-len 4 --num-iters 1 --quantization none,int4,w8a8");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* row : {"\nfloat ", "\nint4 ", "\nw8a8 "}) EXPECT_NE(r.out.find(row), std::string::npos) << row << r.out;
  EXPECT_NE(r.out.find("linears quantized on load (int4)"), std::string::npos) << r.out;
}

TEST(Cli, BenchLatencyComparesKvCacheDtypesInOneRun) {
  test::TempDir d;
  const std::string dir = (d.path() / "m").string();
  ASSERT_EQ(test::run_kimi("make-model " + dir).status, 0);
  const test::CmdResult r = test::run_kimi("bench latency --model " + dir +
                          " --input-len 8 --output-len 4 --num-iters 1 --kv-cache-dtype float32,bfloat16,fp8");
  ASSERT_EQ(r.status, 0) << r.out;
  // The tiny preset's rows: 32 latent + 8 rope values; 160 / 80 / 40 + 8 (fp8 scales) bytes per
  // layer, 3 layers.
  for (const char* row : {"\nkv float32 ", "\nkv bfloat16 ", "\nkv fp8_e4m3 ", " 480 ", " 240 ", " 144 ", "0.500x",
                          "0.300x"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << r.out;
  EXPECT_NE(test::run_kimi("bench latency --model " + dir + " --input-len 8 --output-len 2 --num-iters 1 --kv-cache-dtype fp16").status,
            0);
}

// Speculative variants: each prints its acceptance and its step times, each step timed after the
// step decoding runs before it (a random Eagle3 draft for the tiny target, and n-gram lookup).
TEST(Cli, BenchLatencyTimesSpeculativeSteps) {
  test::TempDir d;
  const std::string dir = (d.path() / "m").string(), draft = (d.path() / "draft").string();
  ASSERT_EQ(test::run_kimi("make-model " + dir).status, 0);
  ASSERT_EQ(test::run_kimi("make-model " + draft + " --draft eagle3").status, 0);
  const test::CmdResult r = test::run_kimi(
      "bench latency --model " + dir + " --input-len 16 --output-len 6 --num-iters 1 --speculative-config '[{\"method\":\"eagle3\",\"model\":\"" +
      draft + "\"},{\"method\":\"ngram\",\"prompt_lookup_min\":1}]' --num-speculative-tokens 1,3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("chain ms"), std::string::npos) << r.out;
  for (const char* variant : {"\neagle3 k=1 ", "\neagle3 k=3 ", "\nngram k=1 ", "\nngram k=3 "}) {
    // Its second row is the step-time table's: k, drafts, accepted, accept len, 5 step times,
    // predicted/s, decode/s, pred x, meas x, meas/pred.
    const size_t first = r.out.find(variant), second = r.out.find(variant, first + 1);
    ASSERT_NE(second, std::string::npos) << variant << r.out;
    std::istringstream row(r.out.substr(second + 1, r.out.find('\n', second + 1) - second - 1));
    std::string name, kname;
    int64_t k = 0, drafts = -1, accepted = -1;
    double accept_len = 0, step[5] = {};
    row >> name >> kname >> k >> drafts >> accepted >> accept_len;
    for (double& t : step) row >> t;
    ASSERT_TRUE(row) << variant << r.out;
    // (random prompt ids: n-gram lookup may find nothing to draft, and then reports 0)
    if (drafts > 0) {
      EXPECT_GE(accept_len, 1.0) << variant;
    } else {
      EXPECT_EQ(accept_len, 0.0) << variant;
    }
    EXPECT_GT(step[0], 0.0) << variant << " plain";
    EXPECT_GT(step[1], 0.0) << variant << " verify";
    if (name == "eagle3") {
      EXPECT_GT(drafts, 0) << variant;
      EXPECT_GT(step[2], 0.0) << variant << " draft";
    }
  }
}

// --dtype: bench latency compares f32 and bf16 activations in one run; generate refuses float16.
TEST(Cli, DtypeSelectsTheActivations) {
  test::TempDir d;
  const std::string dir = (d.path() / "m").string();
  ASSERT_EQ(test::run_kimi("make-model " + dir).status, 0);
  const test::CmdResult r = test::run_kimi("bench latency --model " + dir +
                                           " --input-len 8 --output-len 4 --num-iters 1 --dtype float32,bfloat16");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* row : {"\nfloat f32-act ", "\nfloat bf16-act ", "BF16 linears with bf16 activations"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << r.out;
  const test::CmdResult g = test::run_kimi("generate --model " + dir + " --prompt-ids 1,2,3 --max-tokens 2 --dtype bfloat16");
  EXPECT_EQ(g.status, 0) << g.out;
  const test::CmdResult bad = test::run_kimi("generate --model " + dir + " --prompt-ids 1,2,3 --max-tokens 2 --dtype float16");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("not float16"), std::string::npos) << bad.out;
}

TEST(Cli, BenchThroughputReportsComputeAgainstThePeak) {
  test::TempDir d;
  const std::string dir = (d.path() / "m").string();
  ASSERT_EQ(test::run_kimi("make-model " + dir).status, 0);
  const test::CmdResult r = test::run_kimi("bench throughput --model " + dir + " --concurrency 1,4 --input-len 8 --output-len 4");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("matmul peak measured in the same run"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of peak"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1.00x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV cache: bfloat16\n"), std::string::npos) << r.out;  // kimi serve's default
  const test::CmdResult f = test::run_kimi("bench throughput --model " + dir +
                                           " --concurrency 1 --input-len 8 --output-len 2 --kv-cache-dtype float32");
  ASSERT_EQ(f.status, 0) << f.out;
  EXPECT_NE(f.out.find("KV cache: float32\n"), std::string::npos) << f.out;
  EXPECT_NE(test::run_kimi("bench throughput --model " + dir + " --concurrency 1 --kv-cache-dtype fp16").status, 0);
}

TEST(Cli, BadInputGivesAClearErrorAndNonZeroExit) {
  test::TempDir d;
  test::CmdResult r = test::run_kimi("generate --model " + (d.path() / "missing").string() + " --prompt-ids 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("config.json"), std::string::npos) << r.out;
  r = test::run_kimi("generate --model x --prompt-ids 1,a");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--prompt-ids"), std::string::npos) << r.out;
  r = test::run_kimi("generate --bogus");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown option --bogus"), std::string::npos) << r.out;
  r = test::run_kimi("make-model " + (d.path() / "m").string() + " --preset nope");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown preset"), std::string::npos) << r.out;
  r = test::run_kimi("frobnicate");
  EXPECT_EQ(r.status, 1);
}

}  // namespace
}  // namespace kimi
