#pragma once
// Server-sent events as OpenAI-compatible servers stream them: events end at a blank line
// ("\n\n", "\r\n\r\n" or "\r\r"), an event's `data:` lines are joined with "\n", lines starting
// with ':' are comments (keep-alive pings). Bytes arrive in whatever pieces the network gives,
// so the parser keeps the unfinished tail between feed() calls.
#include <functional>
#include <string>
#include <string_view>

namespace kimi {

class SseParser {
 public:
  using OnEvent = std::function<void(const std::string& data)>;
  explicit SseParser(OnEvent on_event) : on_event_(std::move(on_event)) {}

  void feed(std::string_view bytes);
  // End of stream: an event that lacks only its closing blank line is delivered too.
  void finish();
  // Bytes held back waiting for the end of their line (a cut-off stream leaves them here).
  size_t pending_bytes() const { return line_.size(); }

 private:
  void end_line();
  void dispatch();

  OnEvent on_event_;
  std::string line_;  // the current, unfinished line
  std::string data_;  // data of the current event so far
  bool has_data_ = false;
  bool last_was_cr_ = false;  // "\r\n" is one line end even when cut between two feeds
};

}  // namespace kimi
