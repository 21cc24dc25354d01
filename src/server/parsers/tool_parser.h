#pragma once
// The kimi_k2 tool-call parser (vLLM `--tool-call-parser kimi_k2`). It reads the model's text
// with special tokens kept:
//
//   CONTENT <|tool_calls_section_begin|> <|tool_call_begin|> ID <|tool_call_argument_begin|> ARGS
//   <|tool_call_end|> ... <|tool_calls_section_end|>
//
// Whole text, as vLLM: no section marker -> all content. Otherwise content is the text before
// the first section marker (plural or singular spelling; nullopt if empty) and every
// `<|tool_call_begin|> ws ID ws <|tool_call_argument_begin|> ws ARGS ws <|tool_call_end|>` after
// it is a call, where ID is text without '<' ending in ":DIGITS" (at most 1024 bytes between the
// markers). ARGS runs to the next `<|tool_call_end|>`, but a call is cut short by the next
// `<|tool_call_begin|>` (which starts the next call) or by the end of the text (truncation by
// max_tokens or a stop string); it is kept all the same, with the arguments seen so far. The call
// id is ID verbatim (`functions.get_weather:0`), the name is ID before its first ':' after its
// last '.' (`get_weather`; vLLM's rule, so dotted tool names lose their prefix), the arguments are
// the raw text with surrounding whitespace trimmed, not validated.
//
// Deviations from vLLM: calls before the section marker are not parsed (vLLM's regex scans the
// whole output, so their text would be both content and a call); the singular section marker is
// accepted in the whole-text path too; no 8192-byte section limit (vLLM issue #41182). vLLM's
// whole-text regex drops a call cut short while its stream keeps it (the stream cannot take back
// a call it announced), so the two disagree; here both keep it, so that a client sees the same
// calls and the same finish_reason whether it streams or not.
//
// Streaming: content before the section streams through, with possible marker prefixes held
// back (at most 27 bytes); nothing after the section marker is ever content. A call is announced
// (index, id, name) as soon as its `<|tool_call_argument_begin|>` arrives, then its arguments
// stream as they come, holding back trailing whitespace and possible marker prefixes. The
// assembled stream equals the whole-text result for any split of the text.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

class KimiK2ToolParser {
 public:
  struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;
  };
  struct ToolParseResult {
    std::optional<std::string> content;
    std::vector<ToolCall> calls;
  };
  ToolParseResult extract(std::string_view text) const;

  // One chat-completion-chunk tool_calls entry (type "function" is implied). The first entry for
  // an index carries id and name; later ones carry argument fragments only.
  struct ToolCallDelta {
    int index = 0;
    std::optional<std::string> id;
    std::optional<std::string> name;
    std::string arguments;
  };
  struct StreamDelta {
    std::string content;
    std::vector<ToolCallDelta> tool_calls;
  };
  // Feed text deltas in order, then call finish() once.
  StreamDelta push(std::string_view delta_text);
  StreamDelta finish();

  // True once a call has been announced: finish_reason becomes "tool_calls".
  bool saw_tool_calls() const { return calls_started_ > 0; }

 private:
  enum class State {
    Content,   // before the section marker
    SeekCall,  // in the section, looking for <|tool_call_begin|>
    Id,        // collecting the id, up to the next '<'
    ArgBegin,  // at that '<': is it <|tool_call_argument_begin|>?
    ArgsLead,  // skipping whitespace before the arguments
    Args,      // streaming arguments until <|tool_call_end|>
  };

  void run(StreamDelta& out, bool final);
  void add_arguments(StreamDelta& out, std::string_view text);
  void add_plain_arguments(StreamDelta& out, std::string_view text);

  State state_ = State::Content;
  std::string buf_;  // input not yet consumed (bounded except for what one push brings)
  std::string id_;   // the id region being collected (bounded by the id limit)
  std::string ws_;   // a whitespace run in the arguments, sent only if more arguments follow
  int calls_started_ = 0;
};

}  // namespace kimi
