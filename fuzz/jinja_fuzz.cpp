// The Jinja engine (lexer, parser, interpreter) on fuzzer input, two ways:
//  - template text from the fuzzer, rendered against a fixed chat-like context with a small
//    render budget: only kimi::Error may come out (a syntax or runtime error, or the budget
//    spent), the same template renders the same text twice, and a template without any '{'
//    renders as its own text with Jinja2's newline rules applied;
//  - the K2.5 chat template that make-model ships (templates/kimi-k25.jinja), with the fuzzer's
//    JSON as the request data it gets from clients (messages, tools, chat_template_kwargs):
//    again only kimi::Error, and the same output twice.
// Input: byte 0 = flags (bit 0 trim_blocks, bit 1 lstrip_blocks, bit 2 keep_trailing_newline,
// bit 3: the K2.5 template with JSON data instead of a template), then the template or JSON.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "fuzz_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/template.h"

namespace {

using ojson = nlohmann::ordered_json;

const ojson& fixed_context() {
  static const ojson c = ojson::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in NYC? <b>&</b>"},
      {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
       "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"NYC\"}"}}]},
      {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "{\"temp\": 72}"},
      {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "image_url", "image_url": {"url": "x"}}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "[BOS]", "eos_token": "[EOS]",
    "n": 3, "s": "text", "l": [3, 1, 2], "d": {"b": 1, "a": [true, null, 2.5]}, "none": null
  })");
  return c;
}

// Jinja2's reading of plain text: every line break as "\n", one trailing newline dropped.
std::string jinja2_plain(std::string_view s, bool keep_trailing_newline) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

const kimi::ChatTemplate& k25_template() {
  static const kimi::ChatTemplate t = [] {
    std::ifstream f(KIMI_FUZZ_TEMPLATE_FILE, std::ios::binary);
    if (!f) kimi::fuzz::fail("cannot read " KIMI_FUZZ_TEMPLATE_FILE);
    return kimi::ChatTemplate(std::string(std::istreambuf_iterator<char>(f), {}));
  }();
  return t;
}

void fuzz_template(uint8_t flags, std::string_view text) {
  kimi::jinja::Options o;
  o.trim_blocks = flags & 1;
  o.lstrip_blocks = flags & 2;
  o.keep_trailing_newline = flags & 4;
  o.max_render_steps = 100'000;
  o.max_output_bytes = 1 << 20;
  const std::string source(text);
  std::string first;
  try {
    const kimi::jinja::Template t(source, o);
    first = t.render(fixed_context());
    KIMI_FUZZ_CHECK(t.render(fixed_context()) == first, "a second render differs");
  } catch (const kimi::Error&) {
    return;
  }
  if (text.find('{') == std::string_view::npos)
    KIMI_FUZZ_CHECK(first == jinja2_plain(text, o.keep_trailing_newline), "plain text changed:\n" + first);
}

void fuzz_chat_data(std::string_view text) {
  const ojson j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) return;
  ojson messages = j, tools = nullptr, kwargs = ojson::object();
  if (j.is_object()) {
    messages = j.value("messages", ojson::array());
    tools = j.value("tools", ojson());
    kwargs = j.value("kwargs", ojson::object());
    if (!kwargs.is_object()) kwargs = ojson::object();
  }
  try {
    const std::string first = k25_template().render(messages, tools, true, kwargs, "[BOS]", "[EOS]");
    KIMI_FUZZ_CHECK(k25_template().render(messages, tools, true, kwargs, "[BOS]", "[EOS]") == first,
                    "a second render differs");
  } catch (const kimi::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kimi::fuzz::Input in(data, size);
  const uint8_t flags = in.byte();
  if (flags & 8)
    fuzz_chat_data(in.rest());
  else
    fuzz_template(flags, in.rest());
  return 0;
}
