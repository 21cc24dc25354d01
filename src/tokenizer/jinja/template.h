#pragma once
// A Jinja2-compatible template engine written for chat templates.
//
//   kimi::jinja::Template t(source, {.trim_blocks = true, .lstrip_blocks = true});
//   t.add_function("greet", [](const kimi::jinja::CallArgs& a) { ... });
//   std::string text = t.render({{"messages", messages}, {"add_generation_prompt", true}});
//
// Output matches Python Jinja2 byte for byte for the constructs supported; anything else (syntax
// errors, unsupported tags, runtime type errors, raise_exception) throws kimi::Error with
// "NAME:LINE:COLUMN: message".
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/jinja/value.h"

namespace kimi::jinja {

struct Options {
  bool trim_blocks = false;            // drop the first newline after a block or comment tag
  bool lstrip_blocks = false;          // drop indentation before a block or comment tag
  bool keep_trailing_newline = false;  // Jinja2 drops one trailing newline of the source by default
  std::string name = "template";       // shown in error messages
  // Bounds on one render, so that a hostile template (nested loops over large ranges, macros
  // recursing into themselves twice per level) fails with kimi::Error instead of running for
  // hours or exhausting memory: statements executed plus loop iterations, and bytes of output
  // (of the result and of any captured block). Real chat templates stay far below both.
  int64_t max_render_steps = 100'000'000;
  size_t max_output_bytes = size_t(1) << 30;
};

// A C++ function callable from the template. Throw kimi::Error (or any std::exception) to fail the
// render; the message is reported at the position of the call.
using NativeFunction = std::function<Value(const CallArgs&)>;

class Template {
 public:
  // Parses `source`; throws kimi::Error on syntax errors and unknown filters or tests.
  explicit Template(const std::string& source, Options options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Globals visible to every render (a render's context shadows them).
  void add_function(const std::string& name, NativeFunction fn);
  void set_global(const std::string& name, const nlohmann::ordered_json& value);

  // `context` must be a JSON object (or null); its keys become template variables. Dicts iterate
  // in the JSON object's order: pass ordered_json to keep the document's key order as Python
  // would (nlohmann::json sorts keys).
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;
  // The context as a dict Value (saves a JSON copy when the caller builds values itself).
  std::string render(const Value& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kimi::jinja
