#pragma once
// Kimi's canonical tool-call ids. Kimi-K2.x was trained on calls written as
// `functions.NAME:IDX`, where IDX counts the calls of the whole conversation from 0; the chat
// template writes a call's id verbatim into the prompt, both in the assistant turn that made the
// call and in the `## Return of ID` line of its result. Ids of any other shape (OpenAI's
// `call_abc123`, Anthropic's `toolu_...`, or a canonical-looking id with the wrong index, from
// clients that rewrite ids or mix models) push the model off its training distribution (vLLM
// PR #37438, #46344).
//
// So the server speaks canonical ids both ways: every call it returns gets
// `functions.NAME:IDX` with IDX = the calls already in the request's history + the call's place
// in this answer, whatever id the model wrote; and before a history is rendered, every call id
// in it is rewritten to its canonical form, and the tool results that answer it with it, so the
// two always match.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kimi {

using ojson = nlohmann::ordered_json;

// "functions." + name + ":" + index.
std::string canonical_tool_call_id(std::string_view name, int64_t index);

// The number of tool calls in the assistant messages of a chat history (vLLM's
// get_history_tool_calls_cnt): the IDX of the next call made.
int64_t count_history_tool_calls(const ojson& messages);

// A copy of a (validated) chat history whose assistant tool calls carry canonical ids, the k-th
// call of the conversation `functions.NAME:k`, and whose tool messages answer them with the same
// ids. A tool message's tool_call_id is looked up first among the calls of the latest assistant
// message before it (ids may repeat across turns in some clients), then among all earlier calls;
// an id that matches no call is left as it is. Calls without a function name keep their id.
ojson canonicalize_tool_call_ids(const ojson& messages);

}  // namespace kimi
