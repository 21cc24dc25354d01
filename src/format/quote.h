#pragma once
// A name as the loaders' error messages show it: in single quotes.
#include <string>
#include <string_view>

namespace kimi {

// Built by appending: GCC 12 raises a false -Wrestrict on `"'" + std::string(...)` at -O2.
inline std::string quote(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q.append(1, '\'').append(s).append(1, '\'');
  return q;
}

}  // namespace kimi
