#pragma once
// Type-swap mutations of a request body for the API translation tests: every value in the body
// (at any depth) replaced in turn by each of a few values of other JSON types.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace kimi::test {

// Calls f with every mutation of `body`; returns how many there were.
inline size_t for_each_type_swap(const nlohmann::ordered_json& body,
                                 const std::function<void(const nlohmann::ordered_json&)>& f) {
  using ojson = nlohmann::ordered_json;
  static const ojson kValues[] = {nullptr, 0, -1, 1.5, "", "x", true, ojson::array(), ojson::object(),
                                  ojson::array({1}), ojson::array({"x"}), ojson::object({{"type", 1}})};
  std::vector<ojson::json_pointer> paths;
  std::function<void(const ojson&, const ojson::json_pointer&)> walk = [&](const ojson& j, const ojson::json_pointer& at) {
    if (!at.empty()) paths.push_back(at);
    if (j.is_object())
      for (const auto& [k, v] : j.items()) walk(v, at / k);
    else if (j.is_array())
      for (size_t i = 0; i < j.size(); ++i) walk(j[i], at / i);
  };
  walk(body, ojson::json_pointer());
  size_t n = 0;
  for (const auto& p : paths)
    for (const auto& v : kValues) {
      ojson m = body;
      m[p] = v;
      f(m);
      ++n;
    }
  return n;
}

}  // namespace kimi::test
