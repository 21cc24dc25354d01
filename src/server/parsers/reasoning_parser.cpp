#include "server/parsers/reasoning_parser.h"

#include "server/parsers/marker_scan.h"

namespace kimi {

namespace {

constexpr std::string_view kThinkBegin = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kToolSectionBegin = "<|tool_calls_section_begin|>";

// Where reasoning stops in `body` (text after any leading <think>): the position of the first
// end marker and how many of its bytes are dropped (the section marker is kept as content).
struct ReasoningEnd {
  size_t pos = std::string_view::npos;
  size_t drop = 0;
};

ReasoningEnd find_end(std::string_view body) {
  const size_t e = body.find(kThinkEnd);
  const size_t s = body.find(kToolSectionBegin);
  if (e != std::string_view::npos && (s == std::string_view::npos || e < s)) return {e, kThinkEnd.size()};
  if (s != std::string_view::npos) return {s, 0};
  return {};
}

}  // namespace

KimiK2ReasoningParser::ReasoningResult KimiK2ReasoningParser::extract(std::string_view text) const {
  if (!thinking_) return {std::nullopt, std::string(text)};
  std::string_view body = text;
  if (body.starts_with(kThinkBegin)) body.remove_prefix(kThinkBegin.size());
  const ReasoningEnd end = find_end(body);
  if (end.pos == std::string_view::npos) return {std::string(body), {}};
  return {std::string(body.substr(0, end.pos)), std::string(body.substr(end.pos + end.drop))};
}

KimiK2ReasoningParser::DeltaMessage KimiK2ReasoningParser::push(std::string_view delta_text) {
  DeltaMessage out;
  if (reasoning_ended()) {
    out.content.assign(delta_text);
    return out;
  }
  held_.append(delta_text);
  if (state_ == State::Start) {
    // A leading <think> is only recognised at byte 0, so wait until the first bytes decide it.
    if (parser_detail::could_become(held_, kThinkBegin)) return out;
    if (held_.starts_with(kThinkBegin)) held_.erase(0, kThinkBegin.size());
    state_ = State::Reasoning;
  }
  // held_ is the last push's hold-back (< 28 bytes) plus this delta, so the search is linear.
  const ReasoningEnd end = find_end(held_);
  if (end.pos != std::string_view::npos) {
    out.reasoning.assign(held_, 0, end.pos);
    out.content.assign(held_, end.pos + end.drop);
    held_.clear();
    state_ = State::Content;
    return out;
  }
  const size_t keep = parser_detail::partial_marker_len(held_, {kThinkEnd, kToolSectionBegin});
  out.reasoning.assign(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

KimiK2ReasoningParser::DeltaMessage KimiK2ReasoningParser::finish() {
  DeltaMessage out;
  if (reasoning_ended()) return out;
  // Whatever is held (a proper prefix of a marker) never became one: it is reasoning.
  out.reasoning = std::move(held_);
  held_.clear();
  state_ = State::Content;
  return out;
}

}  // namespace kimi
