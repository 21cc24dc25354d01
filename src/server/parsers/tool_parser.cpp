#include "server/parsers/tool_parser.h"

#include <algorithm>
#include <utility>

#include "server/parsers/marker_scan.h"

namespace kimi {

namespace {

using parser_detail::could_become;
using parser_detail::is_space;
using parser_detail::partial_marker_len;

constexpr std::string_view kSectionBegin = "<|tool_calls_section_begin|>";
constexpr std::string_view kSectionBeginSingular = "<|tool_call_section_begin|>";
constexpr std::string_view kCallBegin = "<|tool_call_begin|>";
constexpr std::string_view kArgBegin = "<|tool_call_argument_begin|>";
constexpr std::string_view kCallEnd = "<|tool_call_end|>";
constexpr size_t npos = std::string_view::npos;

// Real ids are `functions.NAME:IDX`; a longer stretch between <|tool_call_begin|> and the next '<'
// is garbage, and the limit keeps the stream's id buffer bounded.
constexpr size_t kMaxIdRegion = 1024;

// The first section marker of either spelling: {position, marker length}.
std::pair<size_t, size_t> find_section(std::string_view text, size_t from = 0) {
  const size_t p = text.find(kSectionBegin, from);
  const size_t s = text.find(kSectionBeginSingular, from);
  if (s < p) return {s, kSectionBeginSingular.size()};
  return {p, p == npos ? 0 : kSectionBegin.size()};
}

// The id in the text between <|tool_call_begin|> and the next '<', if it is one: surrounding
// whitespace trimmed, then something non-empty, ':' and digits (the regex `[^<]+:\d+`).
std::optional<std::string_view> parse_id(std::string_view region) {
  if (region.size() > kMaxIdRegion) return std::nullopt;
  const std::string_view id = parser_detail::trim(region);
  size_t digits = id.size();
  while (digits > 0 && id[digits - 1] >= '0' && id[digits - 1] <= '9') --digits;
  if (digits == id.size() || digits < 2 || id[digits - 1] != ':') return std::nullopt;
  return id;
}

// vLLM's name rule: before the first ':', after the last '.'.
std::string name_of(std::string_view id) {
  std::string_view head = id.substr(0, id.find(':'));
  if (const size_t dot = head.rfind('.'); dot != npos) head.remove_prefix(dot + 1);
  return std::string(head);
}

// The next occurrence of a needle at or after non-decreasing positions, reusing the last find
// while it is still ahead: the whole-text parse stays linear however many broken calls it meets.
class ForwardFinder {
 public:
  ForwardFinder(std::string_view text, std::string_view needle) : text_(text), needle_(needle) {}
  size_t next(size_t from) {
    if (!searched_ || (found_ != npos && found_ < from)) {
      found_ = text_.find(needle_, from);
      searched_ = true;
    }
    return found_;
  }

 private:
  std::string_view text_, needle_;
  size_t found_ = npos;
  bool searched_ = false;
};

}  // namespace

KimiK2ToolParser::ToolParseResult KimiK2ToolParser::extract(std::string_view text) const {
  ToolParseResult result;
  const auto [section, marker_len] = find_section(text);
  if (section == npos) {
    result.content = std::string(text);
    return result;
  }
  if (section > 0) result.content = std::string(text.substr(0, section));

  ForwardFinder begins(text, kCallBegin), ends(text, kCallEnd);
  size_t pos = section + marker_len;
  while (true) {
    const size_t b = begins.next(pos);
    if (b == npos) break;
    pos = b + kCallBegin.size();  // on failure, the search resumes after this marker
    const size_t lt = text.find('<', pos);
    if (lt == npos) break;  // no argument marker can follow
    const auto id = parse_id(text.substr(pos, lt - pos));
    if (!id || !text.substr(lt).starts_with(kArgBegin)) continue;
    size_t args = lt + kArgBegin.size();
    while (args < text.size() && is_space(text[args])) ++args;
    // The arguments run to <|tool_call_end|>, or are cut short by the next <|tool_call_begin|>
    // (which is tried next) or by the end of the text: a call announced is kept either way,
    // as the stream cannot withdraw it.
    const size_t e = ends.next(args), next = begins.next(args);
    const size_t stop = std::min({e, next, text.size()});
    result.calls.push_back(
        {std::string(*id), name_of(*id), std::string(parser_detail::rtrim(text.substr(args, stop - args)))});
    if (stop == text.size()) break;
    pos = stop == e ? e + kCallEnd.size() : next;
  }
  return result;
}

KimiK2ToolParser::StreamDelta KimiK2ToolParser::push(std::string_view delta_text) {
  StreamDelta out;
  buf_.append(delta_text);
  run(out, false);
  return out;
}

KimiK2ToolParser::StreamDelta KimiK2ToolParser::finish() {
  StreamDelta out;
  run(out, true);
  // A call still open here was cut short; its trailing whitespace is dropped with it.
  buf_.clear();
  id_.clear();
  ws_.clear();
  state_ = State::SeekCall;
  return out;
}

// Argument text holding no marker. Whitespace is sent only once something else follows it:
// at the call's end it is trimmed.
void KimiK2ToolParser::add_plain_arguments(StreamDelta& out, std::string_view text) {
  const std::string_view body = parser_detail::rtrim(text);
  if (!body.empty()) {
    add_arguments(out, ws_);
    ws_.clear();
    add_arguments(out, body);
  }
  ws_.append(text.substr(body.size()));
}

void KimiK2ToolParser::add_arguments(StreamDelta& out, std::string_view text) {
  if (text.empty()) return;
  const int index = calls_started_ - 1;
  if (out.tool_calls.empty() || out.tool_calls.back().index != index)
    out.tool_calls.push_back({index, std::nullopt, std::nullopt, {}});
  out.tool_calls.back().arguments.append(text);
}

// Consumes as much of buf_ as can be decided. `final`: no more text will come, so held-back
// marker prefixes are taken for what they are. Works through a cursor and erases once at the end,
// so one push costs time linear in its size.
void KimiK2ToolParser::run(StreamDelta& out, bool final) {
  const std::string_view s = buf_;
  const size_t n = s.size();
  size_t p = 0;
  bool blocked = false;
  while (!blocked) {
    switch (state_) {
      case State::Content: {
        const auto [q, len] = find_section(s, p);
        if (q != npos) {
          out.content.append(s.substr(p, q - p));
          p = q + len;
          state_ = State::SeekCall;
          break;
        }
        const std::string_view tail = s.substr(p);
        const size_t keep = final ? 0 : partial_marker_len(tail, {kSectionBegin, kSectionBeginSingular});
        out.content.append(s.substr(p, n - p - keep));
        p = n - keep;
        blocked = true;
        break;
      }
      case State::SeekCall: {
        const size_t q = s.find(kCallBegin, p);
        if (q != npos) {
          p = q + kCallBegin.size();
          id_.clear();
          state_ = State::Id;
          break;
        }
        p = n - (final ? 0 : partial_marker_len(s.substr(p), {kCallBegin}));
        blocked = true;
        break;
      }
      case State::Id: {
        const size_t q = s.find('<', p);
        id_.append(s.substr(p, (q == npos ? n : q) - p));
        p = q == npos ? n : q;
        if (id_.size() > kMaxIdRegion) {
          id_.clear();
          state_ = State::SeekCall;  // the rest of the region holds no '<', so no marker is lost
        } else if (q == npos) {
          blocked = true;
        } else {
          state_ = parse_id(id_) ? State::ArgBegin : State::SeekCall;
        }
        break;
      }
      case State::ArgBegin: {
        const std::string_view rest = s.substr(p);
        if (rest.starts_with(kArgBegin)) {
          p += kArgBegin.size();
          const std::string_view id = *parse_id(id_);
          out.tool_calls.push_back({calls_started_++, std::string(id), name_of(id), {}});
          ws_.clear();
          state_ = State::ArgsLead;
        } else if (!final && could_become(rest, kArgBegin)) {
          blocked = true;
        } else {
          state_ = State::SeekCall;  // not a call; the search goes on from this '<'
        }
        break;
      }
      case State::ArgsLead:
        while (p < n && is_space(s[p])) ++p;
        if (p == n)
          blocked = true;
        else
          state_ = State::Args;
        break;
      case State::Args: {
        const size_t q = s.find('<', p);
        const size_t stop = q == npos ? n : q;
        add_plain_arguments(out, s.substr(p, stop - p));
        p = stop;
        if (q == npos) {
          blocked = true;
          break;
        }
        const std::string_view rest = s.substr(q);
        const bool at_end = rest.starts_with(kCallEnd);
        if (at_end || rest.starts_with(kCallBegin)) {
          // The call is over (a new <|tool_call_begin|> cuts it short and starts the next one);
          // whitespace before the marker is not part of the arguments.
          p = q + (at_end ? kCallEnd.size() : kCallBegin.size());
          ws_.clear();
          id_.clear();
          state_ = at_end ? State::SeekCall : State::Id;
        } else if (!final && (could_become(rest, kCallEnd) || could_become(rest, kCallBegin))) {
          blocked = true;
        } else {
          add_plain_arguments(out, "<");
          ++p;
        }
        break;
      }
    }
  }
  buf_.erase(0, p);
}

}  // namespace kimi
