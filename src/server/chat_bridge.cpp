#include "server/chat_bridge.h"

#include <chrono>
#include <cstdio>
#include <utility>

namespace kimi {

namespace {

// Reads the "data: PAYLOAD\n\n" events the chat job writes and hands each to the translator,
// writing what it returns on to the client.
class ChunkReader : public EventWriter {
 public:
  ChunkReader(EventWriter& out, ChatStreamTranslator& t) : out_(out), t_(t) {}
  bool write(std::string_view data) override {
    held_.append(data);
    size_t end;
    while ((end = held_.find("\n\n")) != std::string::npos) {
      std::string event = held_.substr(0, end);
      held_.erase(0, end + 2);
      if (!event.starts_with("data: ")) continue;
      const std::string_view payload = std::string_view(event).substr(6);
      if (payload == "[DONE]") {
        done_ = true;
        continue;
      }
      const ojson j = ojson::parse(payload);
      const std::string text = j.contains("error") ? t_.error(j) : t_.chunk(j);
      if (!text.empty() && !out_.write(text)) {
        gone_ = true;
        return false;
      }
    }
    return true;
  }
  bool done() const { return done_; }
  bool gone() const { return gone_; }

 private:
  EventWriter& out_;
  ChatStreamTranslator& t_;
  std::string held_;
  bool done_ = false, gone_ = false;
};

}  // namespace

std::string dump_json(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string make_response_id(std::string_view prefix, std::atomic<uint64_t>& counter) {
  const uint64_t now = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", (unsigned long long)(now * 0x9E3779B97F4A7C15ull),
                (unsigned long long)(counter++ & 0xffffffffull));
  return std::string(prefix) + buf;
}

std::string sse_event(std::string_view type, const ojson& data) {
  std::string s = "event: ";
  s.append(type);
  s += "\ndata: ";
  s += dump_json(data);
  s += "\n\n";
  return s;
}

BridgedJob::BridgedJob(std::unique_ptr<ResponseJob> chat, Reshape reshape,
                       std::unique_ptr<ChatStreamTranslator> translator)
    : chat_(std::move(chat)), reshape_(std::move(reshape)), translator_(std::move(translator)) {}

void BridgedJob::stream(EventWriter& out) {
  if (!out.write(translator_->begin(chat_->prompt_tokens()))) return;
  ChunkReader reader(out, *translator_);
  chat_->stream(reader);
  // Without [DONE] the chat stream ended on an error (already translated) or a client gone.
  if (reader.done() && !reader.gone()) out.write(translator_->end());
}

}  // namespace kimi
