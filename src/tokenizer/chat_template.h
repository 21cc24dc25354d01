#pragma once
// Chat-template rendering as Hugging Face transformers does it (and vLLM through it): the
// template runs in a Jinja2 environment with trim_blocks and lstrip_blocks on, `tojson` as
// json.dumps(ensure_ascii=False), and the globals raise_exception and strftime_now.
//
// The context is the one HF's apply_chat_template builds: `messages`, `tools` (None or the
// list), `documents` (None), `add_generation_prompt`, `bos_token`, `eos_token`, and every key of
// `extra_kwargs` (chat_template_kwargs such as {"thinking": false}) spread on top.
//
// Key order shows in output (`tools|tojson`, loops over dict items). Python keeps the request's
// order, and so do the ordered_json overloads; the nlohmann::json overloads see keys sorted,
// because nlohmann::json stores objects in a std::map.
//
// Errors (template syntax, raise_exception(), runtime type errors) throw kimi::Error.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace kimi {

namespace jinja {
class Template;
}

// A parsed chat template, to render many conversations without parsing it again.
class ChatTemplate {
 public:
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& extra_kwargs,
                     const std::string& bos_token, const std::string& eos_token) const;
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt,
                     const nlohmann::json& extra_kwargs, const std::string& bos_token,
                     const std::string& eos_token) const;

 private:
  std::unique_ptr<jinja::Template> template_;
};

// Parses `tmpl` and renders one conversation with it.
std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_kwargs, const std::string& bos_token,
                                 const std::string& eos_token);
std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra_kwargs,
                                 const std::string& bos_token, const std::string& eos_token);

}  // namespace kimi
