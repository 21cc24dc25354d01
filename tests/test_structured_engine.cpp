// Structured outputs on the tiny model: token masks against brute force over its vocabulary, and
// constrained generation (temperature 0 and 1) whose every output is valid for its spec.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "common/rng.h"
#include "engine/engine.h"
#include "server/parsers/tool_parser.h"
#include "server/tool_choice.h"
#include "structured/compile.h"
#include "structured/token_mask.h"
#include "test_util.h"

namespace kimi {
namespace {

using structured::SpecKind;
using structured::StructuredSpec;

const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":8},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3},
  "ok":{"type":"boolean"}},
  "required":["name","age","tags"],"additionalProperties":false})";

class StructuredEngineTest : public test::TinyModelTest {
 protected:
  std::vector<int32_t> end_ids() const {
    std::vector<int32_t> e;
    for (int64_t id : model_->config().eos_token_ids) e.push_back(int32_t(id));
    return e;
  }
};

// Every token's verdict from a fresh copy of the state fed the token's bytes.
std::vector<uint64_t> brute_force(const structured::Recognizer& rec, const structured::ParseState& state,
                                  const structured::TokenVocab& vocab, const std::vector<int32_t>& ends) {
  std::vector<uint64_t> m(vocab.words(), 0);
  bool any = false;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (size_t(id) >= vocab.token_count() || vocab.bytes(id).empty()) continue;
    // Ordinary tokens holding 0xFF (never UTF-8) could spell part of a special token's key: never allowed.
    if (!vocab.is_special(id) && vocab.bytes(id).find(char(0xFF)) != std::string::npos) continue;
    structured::ParseState a = state, b;
    bool ok = true;
    for (char c : vocab.bytes(id)) {
      if (!rec.advance(a, uint8_t(c), b)) { ok = false; break; }
      std::swap(a, b);
    }
    if (ok) {
      m[size_t(id) / 64] |= uint64_t(1) << (id % 64);
      any = true;
    }
  }
  if (state.complete || !any)
    for (int32_t id : ends) m[size_t(id) / 64] |= uint64_t(1) << (id % 64);
  return m;
}

TEST_F(StructuredEngineTest, MasksAgreeWithBruteForce) {
  const auto vocab = structured::TokenVocab::from_tokenizer(*tokenizer_, model_->config().vocab_size);
  ApiRequest tool_req;
  tool_req.tools = ojson::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"x":{"type":"integer","minimum":0,"maximum":9}},"required":["x"]}}}])");
  tool_req.messages = ojson::array();
  tool_req.tool_choice = "required";
  std::vector<StructuredSpec> specs = {
      forced_tool_calls_spec(tool_req, *tokenizer_),
      {SpecKind::JsonSchema, kPersonSchema},
      {SpecKind::JsonObject, ""},
      {SpecKind::Regex, "(\\d{1,3}\\.){3}\\d{1,3}|[a-z ]{0,12}!"},
      {SpecKind::Choice, R"(["positive","negative","neutral"])"},
      {SpecKind::Grammar, "root ::= \"(\" [a-z]+ (\",\" [a-z]+)* \")\""},
      {SpecKind::JsonSchema, R"({"type":"array","items":{"type":"number","minimum":-3,"maximum":7.5},"maxItems":4})"},
  };
  tool_req.tool_choice = "auto";  // with a strict tool: text or the section
  tool_req.tools[0]["function"]["strict"] = true;
  specs.push_back(forced_tool_calls_spec(tool_req, *tokenizer_));
  Rng rng(7);
  int checked = 0;
  for (const StructuredSpec& spec : specs) {
    const auto rec = structured::compile(spec);
    structured::GrammarMatcher m(rec, vocab, end_ids());
    structured::ParseState state = rec->initial();
    for (int step = 0; step < 40; ++step) {
      const std::vector<uint64_t> fast = m.mask();
      const std::vector<uint64_t> slow = brute_force(*rec, state, *vocab, end_ids());
      ASSERT_EQ(fast, slow) << "spec " << spec.text << " step " << step;
      ++checked;
      // Follow a random allowed token.
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id)
        if ((fast[size_t(id) / 64] >> (id % 64)) & 1) allowed.push_back(id);
      ASSERT_FALSE(allowed.empty());
      const int32_t tok = allowed[rng.next_u64() % allowed.size()];
      ASSERT_TRUE(m.accept_token(tok));
      if (m.finished()) break;
      structured::ParseState b;
      for (char c : vocab->bytes(tok)) {
        ASSERT_TRUE(rec->advance(state, uint8_t(c), b));
        std::swap(state, b);
      }
    }
  }
  EXPECT_GT(checked, 60);
}

TEST_F(StructuredEngineTest, RejectsTokensOutsideTheGrammar) {
  const auto vocab = structured::TokenVocab::from_tokenizer(*tokenizer_, model_->config().vocab_size);
  structured::GrammarMatcher m(structured::compile({SpecKind::Choice, R"(["yes"])"}), vocab, end_ids());
  const auto no = tokenizer_->encode("no", false);
  EXPECT_FALSE(m.accept_token(no[0]));
  EXPECT_FALSE(m.is_complete());
  for (int32_t t : tokenizer_->encode("yes", false)) EXPECT_TRUE(m.accept_token(t));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.can_continue());
  const auto& mask = m.mask();  // only the end tokens are left
  int n = 0;
  for (uint64_t w : mask) n += __builtin_popcountll(w);
  EXPECT_EQ(n, int(end_ids().size()));
}

void check_person(const std::string& text) {
  const auto j = nlohmann::json::parse(text);  // throws on invalid JSON
  ASSERT_TRUE(j.is_object()) << text;
  for (const auto& [k, v] : j.items()) EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "ok") << text;
  ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
  EXPECT_LE(j["name"].get<std::string>().size(), 8u * 4) << text;
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
  EXPECT_GE(j["age"].get<int64_t>(), 0);
  EXPECT_LE(j["age"].get<int64_t>(), 120);
  ASSERT_TRUE(j.contains("tags") && j["tags"].is_array()) << text;
  EXPECT_LE(j["tags"].size(), 3u);
  for (const auto& t : j["tags"]) EXPECT_TRUE(t == "a" || t == "b" || t == "c") << text;
  if (j.contains("ok")) {
    EXPECT_TRUE(j["ok"].is_boolean()) << text;
  }
}

TEST_F(StructuredEngineTest, ConstrainedGenerationIsAlwaysValid) {
  EngineConfig c;
  c.block_size = 4;
  c.scheduler.max_model_len = 512;
  c.scheduler.max_num_seqs = 32;
  c.kv_cache_bytes = size_t(1024) * KvStorage::bytes_per_block(model_->config(), c.block_size);
  Engine engine(*model_, tokenizer_.get(), c);
  const std::vector<int32_t> prompt = tokenizer_->encode("Describe a person as JSON:", false);

  struct Case {
    StructuredSpec spec;
    std::function<void(const std::string&)> check;
  };
  const std::vector<Case> cases = {
      {{SpecKind::JsonSchema, kPersonSchema}, check_person},
      {{SpecKind::Regex, "[A-Z][a-z]{2,6}-\\d{2}"},
       [](const std::string& t) { EXPECT_TRUE(std::regex_match(t, std::regex("[A-Z][a-z]{2,6}-[0-9]{2}"))) << t; }},
      {{SpecKind::Choice, R"(["alpha","beta","gamma delta"])"},
       [](const std::string& t) { EXPECT_TRUE(t == "alpha" || t == "beta" || t == "gamma delta") << t; }},
      {{SpecKind::Grammar, "root ::= \"[\" item (\",\" item){0,3} \"]\"\nitem ::= [0-9] | \"x\""},
       [](const std::string& t) { EXPECT_TRUE(std::regex_match(t, std::regex("\\[([0-9]|x)(,([0-9]|x)){0,3}\\]"))) << t; }},
  };
  for (float temperature : {0.0f, 1.0f}) {
    for (const Case& cs : cases) {
      SamplingParams p;
      p.temperature = temperature;
      p.max_tokens = 300;
      p.n = temperature == 0 ? 1 : 6;
      p.seed = 11;
      p.structured = cs.spec;
      const auto out = engine.generate({prompt}, p);
      for (const Completion& comp : out[0]) {
        EXPECT_EQ(comp.finish_reason, FinishReason::Stop) << comp.text;
        cs.check(comp.text);
      }
    }
  }
  // Unconstrained, the same model at the same settings does not produce such text.
  SamplingParams free;
  free.temperature = 0;
  free.max_tokens = 30;
  const auto out = engine.generate({prompt}, free);
  EXPECT_FALSE(nlohmann::json::accept(out[0][0].text)) << out[0][0].text;
}

TEST_F(StructuredEngineTest, StartsAfterTheReasoningEndToken) {
  EngineConfig c;
  c.block_size = 4;
  c.scheduler.max_model_len = 256;
  c.kv_cache_bytes = size_t(256) * KvStorage::bytes_per_block(model_->config(), c.block_size);
  Engine engine(*model_, tokenizer_.get(), c);
  const std::vector<int32_t> prompt = tokenizer_->encode("Think, then answer:", false);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 40;
  p.ignore_eos = true;
  p.skip_special_tokens = false;
  p.structured = {SpecKind::Choice, R"(["yes","no"])"};
  // Start after a token that greedy decoding produces early: the first unconstrained token.
  SamplingParams probe = p;
  probe.structured = {};
  const auto free_out = engine.generate({prompt}, probe);
  const int32_t marker = free_out[0][0].token_ids.at(0);
  p.structured.start_after_token = marker;
  const auto out = engine.generate({prompt}, p);
  const auto& toks = out[0][0].token_ids;
  ASSERT_EQ(toks.at(0), marker);  // unconstrained up to and including the marker
  const std::string after = tokenizer_->decode(std::span(toks).subspan(1), true);
  EXPECT_TRUE(after == "yes" || after == "no") << after;
}

TEST_F(StructuredEngineTest, UnsupportedSchemaIsAParamError) {
  EngineConfig c;
  c.block_size = 4;
  c.scheduler.max_model_len = 64;
  c.kv_cache_bytes = size_t(64) * KvStorage::bytes_per_block(model_->config(), c.block_size);
  Engine engine(*model_, tokenizer_.get(), c);
  SamplingParams p;
  p.structured = {SpecKind::JsonSchema, R"({"type":"integer","multipleOf":2})", "response_format"};
  try {
    engine.validate({1, 2, 3}, p);
    FAIL() << "no error";
  } catch (const ParamError& e) {
    EXPECT_EQ(e.param(), "response_format");
    EXPECT_NE(std::string(e.what()).find("multipleOf"), std::string::npos);
  }
  Engine no_tok(*model_, nullptr, c);
  p.structured = {SpecKind::Regex, "a"};
  EXPECT_THROW(no_tok.validate({1, 2, 3}, p), ParamError);
}

}  // namespace
}  // namespace kimi

namespace kimi {
namespace {

// tool_choice required / named on the tiny model: every output is a Kimi tool-call section the
// kimi_k2 parser reads as calls of allowed tools, canonical ids counting on from the history,
// arguments valid for the tool's schema.
TEST_F(StructuredEngineTest, ForcedToolCallsAreValid) {
  EngineConfig c;
  c.block_size = 4;
  c.scheduler.max_model_len = 512;
  c.scheduler.max_num_seqs = 16;
  c.kv_cache_bytes = size_t(1024) * KvStorage::bytes_per_block(model_->config(), c.block_size);
  Engine engine(*model_, tokenizer_.get(), c);
  const std::vector<int32_t> prompt = tokenizer_->encode("Call a tool:", false);
  ApiRequest r;
  r.tools = ojson::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
      "city":{"enum":["Paris","Oslo"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}}},
    {"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}])");
  r.messages = ojson::parse(R"([{"role":"user","content":"x"},{"role":"assistant","tool_calls":[
    {"id":"functions.ping:0","type":"function","function":{"name":"ping","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"functions.ping:0","content":"ok"}])");
  for (const std::string choice : {"required", "named"}) {
    for (bool parallel : {true, false}) {
      r.tool_choice = choice;
      r.tool_choice_name = "get_weather";
      r.parallel_tool_calls = parallel;
      SamplingParams p;
      p.temperature = 1;
      p.n = 3;
      p.seed = 3;
      p.max_tokens = 400;
      p.skip_special_tokens = false;
      p.structured = forced_tool_calls_spec(r, *tokenizer_);
      ASSERT_EQ(p.structured.kind, SpecKind::ToolCalls);
      const auto outs = engine.generate({prompt}, p);
      for (const Completion& comp : outs[0]) {
        EXPECT_EQ(comp.finish_reason, FinishReason::Stop) << comp.text;
        const auto parsed = KimiK2ToolParser().extract(comp.text);
        ASSERT_FALSE(parsed.calls.empty()) << comp.text;
        if (!parallel) {
          EXPECT_EQ(parsed.calls.size(), 1u) << comp.text;
        }
        for (size_t k = 0; k < parsed.calls.size(); ++k) {
          const auto& call = parsed.calls[k];
          if (choice == "named") {
            EXPECT_EQ(call.name, "get_weather");
          }
          EXPECT_EQ(call.id, "functions." + call.name + ":" + std::to_string(k + 1)) << comp.text;
          const auto args = nlohmann::json::parse(call.arguments);
          ASSERT_TRUE(args.is_object());
          if (call.name == "get_weather") {
            EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Oslo") << call.arguments;
            EXPECT_GE(args["days"].get<int>(), 1);
            EXPECT_LE(args["days"].get<int>(), 7);
            EXPECT_EQ(args.size(), 2u);
          } else {
            EXPECT_EQ(call.name, "ping");
            EXPECT_TRUE(args.empty()) << call.arguments;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kimi
