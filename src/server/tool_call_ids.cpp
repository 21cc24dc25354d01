#include "server/tool_call_ids.h"

#include <map>

namespace kimi {

namespace {

bool has_role(const ojson& m, const char* role) {
  if (!m.is_object()) return false;
  auto it = m.find("role");
  return it != m.end() && *it == role;
}
bool is_assistant(const ojson& m) { return has_role(m, "assistant"); }

const ojson* calls_of(const ojson& m) {
  auto it = m.find("tool_calls");
  return it != m.end() && it->is_array() ? &*it : nullptr;
}

// The function name of a call, or nullptr when it has none.
const std::string* name_of(const ojson& call) {
  if (!call.is_object()) return nullptr;
  auto fn = call.find("function");
  if (fn == call.end() || !fn->is_object()) return nullptr;
  auto name = fn->find("name");
  return name != fn->end() && name->is_string() ? &name->get_ref<const std::string&>() : nullptr;
}

}  // namespace

std::string canonical_tool_call_id(std::string_view name, int64_t index) {
  std::string id = "functions.";
  id.append(name);
  id += ':';
  id += std::to_string(index);
  return id;
}

int64_t count_history_tool_calls(const ojson& messages) {
  int64_t n = 0;
  if (!messages.is_array()) return 0;
  for (const auto& m : messages)
    if (is_assistant(m))
      if (const ojson* calls = calls_of(m)) n += int64_t(calls->size());
  return n;
}

ojson canonicalize_tool_call_ids(const ojson& messages) {
  ojson out = messages;
  if (!out.is_array()) return out;
  int64_t index = 0;
  std::map<std::string, std::string> latest, all;  // old id -> canonical id
  for (auto& m : out) {
    if (is_assistant(m) && calls_of(m)) {
      latest.clear();
      for (auto& call : m["tool_calls"]) {
        const std::string* name = name_of(call);
        const int64_t k = index++;
        if (!name) continue;
        const std::string canonical = canonical_tool_call_id(*name, k);
        auto id = call.find("id");
        if (id != call.end() && id->is_string()) {
          const std::string old = id->get<std::string>();
          latest.emplace(old, canonical);  // the first call wins a repeated id
          all[old] = canonical;            // a later turn's call wins across turns
        }
        call["id"] = canonical;
      }
      continue;
    }
    if (!has_role(m, "tool")) continue;
    auto tid = m.find("tool_call_id");
    if (tid == m.end() || !tid->is_string()) continue;
    const std::string old = tid->get<std::string>();
    if (auto it = latest.find(old); it != latest.end()) *tid = it->second;
    else if (auto jt = all.find(old); jt != all.end()) *tid = jt->second;
  }
  return out;
}

}  // namespace kimi
