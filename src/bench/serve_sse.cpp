#include "bench/serve_sse.h"

namespace kimi {

void SseParser::feed(std::string_view bytes) {
  for (const char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // the second half of "\r\n"
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = c == '\r';
    if (c == '\n' || c == '\r') end_line();
    else line_ += c;
  }
}

void SseParser::finish() {
  if (!line_.empty()) end_line();
  dispatch();
}

void SseParser::end_line() {
  if (line_.empty()) {  // a blank line ends the event
    dispatch();
    return;
  }
  if (line_[0] != ':') {  // ':' starts a comment
    const size_t colon = line_.find(':');
    const std::string_view field = std::string_view(line_).substr(0, colon);
    std::string_view value = colon == std::string::npos ? std::string_view() : std::string_view(line_).substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_.append(value);
      has_data_ = true;
    }  // event:, id:, retry: carry nothing a benchmark needs
  }
  line_.clear();
}

void SseParser::dispatch() {
  if (has_data_) on_event_(data_);
  data_.clear();
  has_data_ = false;
}

}  // namespace kimi
