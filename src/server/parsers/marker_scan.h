#pragma once
// Small text helpers shared by the kimi_k2 output parsers. The markers they look for are special
// tokens detokenized as text, so a marker may arrive split across stream deltas.
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string_view>

namespace kimi::parser_detail {

// ASCII whitespace, what the vLLM regexes' \s matches in practice around ids and arguments.
inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

inline std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Length of the longest suffix of `text` that is a proper, non-empty prefix of one of `markers`:
// the bytes a stream must hold back because the next delta may complete a marker. Bounded by
// the longest marker's length - 1.
inline size_t partial_marker_len(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t longest = 0;
  for (std::string_view m : markers) longest = std::max(longest, m.size());
  const size_t max_k = std::min(text.size(), longest == 0 ? size_t(0) : longest - 1);
  for (size_t k = max_k; k > 0; --k) {
    const std::string_view tail = text.substr(text.size() - k);
    if (tail.front() != '<') continue;  // every marker starts with '<'
    for (std::string_view m : markers)
      if (k < m.size() && m.starts_with(tail)) return k;
  }
  return 0;
}

// True when `rest` (which reached the end of the available text) could still grow into `marker`.
inline bool could_become(std::string_view rest, std::string_view marker) {
  return rest.size() < marker.size() && marker.starts_with(rest);
}

}  // namespace kimi::parser_detail
