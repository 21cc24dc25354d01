#pragma once
// The kimi_k2 reasoning parser (vLLM `--reasoning-parser kimi_k2`): splits a Kimi-K2.x
// completion into reasoning and content. It works on text with the special tokens kept.
//
// Reasoning runs from the start of the output (a leading `<think>` is dropped when present; the
// K2.5 prompt usually ends with `<think>` so the model starts reasoning directly) up to the first
// `</think>` (dropped) or `<|tool_calls_section_begin|>` (kept, and passed on as content for the
// tool parser), whichever comes first. No end marker: all of it is reasoning. With thinking off
// (chat_template_kwargs thinking=false / enable_thinking=false) everything is content.
//
// Deviations from vLLM, so that streamed and whole-text results always agree: vLLM's whole-text
// path prefers a `</think>` found anywhere over an earlier tool section; here the earlier marker
// wins, as in vLLM's streaming path. vLLM's stream drops a lone `<think>` token in the middle of
// reasoning; here it stays in the reasoning text, as in vLLM's whole-text path.
#include <optional>
#include <string>
#include <string_view>

namespace kimi {

class KimiK2ReasoningParser {
 public:
  explicit KimiK2ReasoningParser(bool thinking = true) : thinking_(thinking) {}

  struct ReasoningResult {
    std::optional<std::string> reasoning;  // nullopt only with thinking off; may be "" otherwise
    std::string content;
  };
  ReasoningResult extract(std::string_view text) const;

  // Streaming: feed text deltas in order, then call finish() once. The concatenation of all
  // returned reasoning (content) equals extract(whole text).reasoning (content), however the text
  // was split. Bytes that may be the start of a marker are held back, at most 27 of them.
  struct DeltaMessage {
    std::string reasoning;
    std::string content;
  };
  DeltaMessage push(std::string_view delta_text);
  DeltaMessage finish();

  // True once reasoning has ended (or with thinking off): further text is content.
  bool reasoning_ended() const { return !thinking_ || state_ == State::Content; }

 private:
  enum class State { Start, Reasoning, Content };

  bool thinking_;
  State state_ = State::Start;
  std::string held_;  // text not yet classified (a possible `<think>` or end-marker prefix)
};

}  // namespace kimi
