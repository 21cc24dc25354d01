#include "engine/stop_strings.h"

#include <algorithm>
#include <utility>

namespace kimi {

namespace {

struct Match {
  size_t start = std::string_view::npos;
  size_t len = 0;
  const std::string* stop = nullptr;
};

// The earliest-ending occurrence of any stop string in text (the longest among equal ends).
// For one stop string all occurrences have the same length, so its first is its earliest-ending.
Match first_completed(std::string_view text, const std::vector<std::string>& stops) {
  Match best;
  size_t best_end = std::string_view::npos;
  for (const std::string& s : stops) {
    const size_t pos = text.find(s);
    if (pos == std::string_view::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && s.size() > best.len)) {
      best = {pos, s.size(), &s};
      best_end = end;
    }
  }
  return best;
}

// Length of the longest suffix of text that is a proper prefix of some stop string: the bytes
// that a later token could still complete into a stop string.
size_t partial_suffix(std::string_view text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& s : stops) {
    for (size_t n = std::min(s.size() - 1, text.size()); n > longest; --n)
      if (text.substr(text.size() - n) == std::string_view(s).substr(0, n)) {
        longest = n;
        break;
      }
  }
  return longest;
}

}  // namespace

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop_str)
    : include_(include_stop_str) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));  // an empty stop string would match at once
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view new_text) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    r.matched = matched_;
    return r;
  }
  held_.append(new_text);
  // Earlier text held no complete stop string, and any occurrence still in progress starts
  // inside held_, so searching held_ alone finds the first completed one.
  const Match m = first_completed(held_, stops_);
  if (m.stop) {
    stopped_ = true;
    matched_ = *m.stop;
    r.emit = held_.substr(0, include_ ? m.start + m.len : m.start);
    r.stopped = true;
    r.matched = matched_;
    held_.clear();
    return r;
  }
  const size_t keep = partial_suffix(held_, stops_);
  r.emit = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopStringMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(held_, {});
}

std::string apply_stop_strings(std::string_view text, const std::vector<std::string>& stops, bool include_stop_str,
                               std::string* matched) {
  std::vector<std::string> nonempty;
  for (const std::string& s : stops)
    if (!s.empty()) nonempty.push_back(s);
  const Match m = first_completed(text, nonempty);
  if (matched) *matched = m.stop ? *m.stop : std::string();
  if (!m.stop) return std::string(text);
  return std::string(text.substr(0, include_stop_str ? m.start + m.len : m.start));
}

}  // namespace kimi
