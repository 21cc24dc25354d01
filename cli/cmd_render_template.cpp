// `kimi render-template`: renders a chat template over conversations, as Hugging Face's
// apply_chat_template(tokenize=False) would. Used by the parity test against @huggingface/jinja.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "args.h"
#include "common/error.h"
#include "tokenizer/chat_template.h"

namespace kimi::cli {

namespace {

// One case: {"messages": [...], "tools": [...]|null, "add_generation_prompt": bool,
// "kwargs": {...}, "bos_token": "...", "eos_token": "..."}.
std::string render_case(const ChatTemplate& tmpl, const nlohmann::ordered_json& c) {
  if (!c.is_object() || !c.contains("messages")) throw Error("each case must be an object with \"messages\"");
  const nlohmann::ordered_json tools = c.value("tools", nlohmann::ordered_json());
  const nlohmann::ordered_json kwargs = c.value("kwargs", nlohmann::ordered_json::object());
  return tmpl.render(c["messages"], tools, c.value("add_generation_prompt", false), kwargs,
                     c.value("bos_token", std::string()), c.value("eos_token", std::string()));
}

}  // namespace

int run_render_template(int argc, char** argv) {
  const Args a(argc, argv, 2, {"template", "input"}, {"help"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi render-template --template FILE --input CASES.json\n\n"
        "Renders a Jinja chat template as Hugging Face transformers does (trim_blocks, lstrip_blocks,\n"
        "tojson as json.dumps). CASES.json ('-' for stdin) is one case or an array of cases:\n"
        "  {\"name\": \"...\", \"messages\": [...], \"tools\": [...] or null, \"add_generation_prompt\": true,\n"
        "   \"kwargs\": {\"thinking\": false}, \"bos_token\": \"\", \"eos_token\": \"\"}\n"
        "One case prints the prompt text; an array prints a JSON array of {\"name\", \"output\"} or\n"
        "{\"name\", \"error\"} objects.\n");
    return 0;
  }
  const ChatTemplate tmpl(read_input(a.require("template")));
  nlohmann::ordered_json input;
  try {
    input = nlohmann::ordered_json::parse(read_input(a.require("input")));
  } catch (const nlohmann::json::exception& e) {
    throw Error("--input is not valid JSON: " + std::string(e.what()));
  }
  if (!input.is_array()) {
    const std::string out = render_case(tmpl, input);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& c : input) {
    nlohmann::ordered_json r;
    r["name"] = c.is_object() ? c.value("name", std::string()) : std::string();
    try {
      r["output"] = render_case(tmpl, c);
    } catch (const Error& e) {
      r["error"] = e.what();
    }
    results.push_back(std::move(r));
  }
  const std::string out = results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace kimi::cli
