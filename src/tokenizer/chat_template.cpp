#include "tokenizer/chat_template.h"

#include "common/error.h"
#include "tokenizer/jinja/template.h"

namespace kimi {

namespace {

template <class Json>
std::string render(const std::string& tmpl, const Json& messages, const Json& tools, bool add_generation_prompt,
                   const Json& extra_kwargs, const std::string& bos_token, const std::string& eos_token) {
  if (!messages.is_array()) throw Error("chat template: messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) throw Error("chat template: tools must be null or a JSON array");
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object())
    throw Error("chat template: extra template arguments must be a JSON object");

  jinja::Options options;
  options.trim_blocks = true;
  options.lstrip_blocks = true;
  options.name = "chat_template";
  const jinja::Template t(tmpl, options);

  Json context = Json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  if (extra_kwargs.is_object())
    for (const auto& [k, v] : extra_kwargs.items()) context[k] = v;
  return t.render(context);
}

}  // namespace

std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_kwargs, const std::string& bos_token,
                                 const std::string& eos_token) {
  return render(tmpl, messages, tools, add_generation_prompt, extra_kwargs, bos_token, eos_token);
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra_kwargs,
                                 const std::string& bos_token, const std::string& eos_token) {
  return render(tmpl, messages, tools, add_generation_prompt, extra_kwargs, bos_token, eos_token);
}

}  // namespace kimi
