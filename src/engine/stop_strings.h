#pragma once
// Finds a sequence's stop strings in its text as the text streams in, token by token. A stop
// string may be split across tokens, so text that could still turn into one is held back (at
// most the longest stop string's length - 1 bytes) until it can no longer match.
//
// The sequence stops at the first stop string to be completed (the earliest-ending occurrence;
// of several ending at the same byte, the longest), which is what a stream can decide without
// looking ahead, and so the result is the same however the text is split.
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops, bool include_stop_str);

  struct Result {
    std::string emit;     // safe to send now
    bool stopped = false; // a stop string matched: emit ends at it (or after it, if included)
    std::string matched;  // the stop string, when stopped
  };
  // Appends one token's text. After a stop, further text is ignored.
  Result push(std::string_view new_text);
  // At the end of the sequence (no stop): releases the held-back text.
  std::string flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  bool include_;
  std::string held_;  // text not yet emitted: a suffix that is a proper prefix of some stop string
  bool stopped_ = false;
  std::string matched_;
};

// The whole-text answer the matcher must agree with: the text up to (or through, if included)
// the first stop string completed, and which one (empty if none).
std::string apply_stop_strings(std::string_view text, const std::vector<std::string>& stops, bool include_stop_str,
                               std::string* matched = nullptr);

}  // namespace kimi
