#pragma once
// Type-swap mutations of a request body for the API translation tests: every value in the body
// (at any depth) replaced in turn by each of a few values of other JSON types, and the check that
// a translation either accepts each of them or answers a 400.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_error.h"

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

// Runs every mutation of `body` through each of `translations` (the API's request to a chat
// request and the chat parser after it): each run either passes or throws an ApiError 400, never
// another exception (a JSON type error would be a 500). At least one run must pass, and there
// must be more than 300 mutations (the body covers the API's fields).
inline void expect_type_swaps_accepted_or_400(
    const nlohmann::ordered_json& body,
    const std::vector<std::function<void(const nlohmann::ordered_json&)>>& translations) {
  size_t accepted = 0;
  const size_t n = for_each_type_swap(body, [&](const nlohmann::ordered_json& m) {
    for (const auto& translate : translations) {
      try {
        translate(m);
        ++accepted;
      } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << m.dump();
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what() << " for " << m.dump();
      }
    }
  });
  EXPECT_GT(n, 300u);
  EXPECT_GT(accepted, 0u);
}

}  // namespace kimi::test
