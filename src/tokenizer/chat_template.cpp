#include "tokenizer/chat_template.h"

#include "common/error.h"
#include "tokenizer/jinja/template.h"

namespace kimi {

namespace {

jinja::Options hf_options() {
  jinja::Options options;
  options.trim_blocks = true;
  options.lstrip_blocks = true;
  options.name = "chat_template";
  return options;
}

template <class Json>
std::string render_with(const jinja::Template& t, const Json& messages, const Json& tools, bool add_generation_prompt,
                        const Json& extra_kwargs, const std::string& bos_token, const std::string& eos_token) {
  if (!messages.is_array()) throw Error("chat template: messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) throw Error("chat template: tools must be null or a JSON array");
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object())
    throw Error("chat template: extra template arguments must be a JSON object");

  // Built as values directly: no copy of the conversation as JSON.
  using jinja::Value;
  const Value context = Value::dict();
  jinja::Dict& c = context.get_dict();
  c.set("messages", Value::from_json(messages));
  c.set("tools", Value::from_json(tools));
  c.set("documents", Value::none());
  c.set("add_generation_prompt", Value::boolean(add_generation_prompt));
  c.set("bos_token", Value::string(bos_token));
  c.set("eos_token", Value::string(eos_token));
  if (extra_kwargs.is_object())
    for (const auto& [k, v] : extra_kwargs.items()) c.set(std::string_view(k), Value::from_json(v));
  return t.render(context);
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source)
    : template_(std::make_unique<jinja::Template>(source, hf_options())) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra_kwargs,
                                 const std::string& bos_token, const std::string& eos_token) const {
  return render_with(*template_, messages, tools, add_generation_prompt, extra_kwargs, bos_token, eos_token);
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt,
                                 const nlohmann::json& extra_kwargs, const std::string& bos_token,
                                 const std::string& eos_token) const {
  return render_with(*template_, messages, tools, add_generation_prompt, extra_kwargs, bos_token, eos_token);
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_kwargs, const std::string& bos_token,
                                 const std::string& eos_token) {
  return ChatTemplate(tmpl).render(messages, tools, add_generation_prompt, extra_kwargs, bos_token, eos_token);
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra_kwargs,
                                 const std::string& bos_token, const std::string& eos_token) {
  return ChatTemplate(tmpl).render(messages, tools, add_generation_prompt, extra_kwargs, bos_token, eos_token);
}

}  // namespace kimi
