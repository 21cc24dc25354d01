#include "structured/matcher.h"

#include <algorithm>
#include <cstring>

namespace kimi::structured {

std::string ParseState::key() const {
  std::string k(1, complete ? '\1' : '\0');
  k.append(reinterpret_cast<const char*>(ends.data()), ends.size() * sizeof(uint32_t));
  k.push_back('|');
  k.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(uint32_t));
  return k;
}

Recognizer::Recognizer(Grammar g) : g_(std::move(g)) {}

void Recognizer::push_stack(const std::vector<uint32_t>& st, ParseState& out, size_t& budget) const {
  if (out.ends.size() >= kMaxStacks || st.size() > kMaxStackDepth) return;
  // Duplicates come from ambiguous grammars; keeping one of each bounds the state. The scan is
  // charged to the step's budget: it is most of a step's work when many paths reach many stacks.
  if (budget < out.ends.size()) {
    budget = 0;
    return;
  }
  budget -= out.ends.size();
  uint32_t begin = 0;
  for (uint32_t e : out.ends) {
    if (e - begin == st.size() && std::equal(st.begin(), st.end(), out.data.begin() + begin)) return;
    begin = e;
  }
  out.data.insert(out.data.end(), st.begin(), st.end());
  out.ends.push_back(uint32_t(out.data.size()));
}

void Recognizer::expand(std::vector<uint32_t>& st, ParseState& out, size_t depth, size_t& budget) const {
  if (depth > kMaxStackDepth || budget == 0) return;
  --budget;
  if (st.empty()) {
    out.complete = true;
    return;
  }
  const uint32_t pos = st.back();
  const Element& e = g_.elems[pos];
  switch (e.kind) {
    case Element::Bytes:
      push_stack(st, out, budget);
      return;
    case Element::End:
      st.pop_back();
      expand(st, out, depth + 1, budget);
      st.push_back(pos);
      return;
    case Element::Rule: {
      st.pop_back();
      const bool tail = g_.elems[pos + 1].kind == Element::End;  // nothing left after the call
      if (!tail) st.push_back(pos + 1);
      for (uint32_t a : g_.rule_alts[e.value]) {
        st.push_back(a);
        expand(st, out, depth + 1, budget);
        st.pop_back();
      }
      if (!tail) st.pop_back();
      st.push_back(pos);
      return;
    }
  }
}

ParseState Recognizer::initial() const {
  ParseState s;
  std::vector<uint32_t> st;
  size_t budget = kMaxExpansions;
  for (uint32_t a : g_.rule_alts[g_.root]) {
    st.assign(1, a);
    expand(st, s, 0, budget);
  }
  return s;
}

bool Recognizer::advance(const ParseState& in, uint8_t b, ParseState& out) const {
  out.clear();
  std::vector<uint32_t> st;
  size_t budget = kMaxExpansions;
  uint32_t begin = 0;
  for (uint32_t end : in.ends) {
    const uint32_t top = in.data[end - 1];
    if (g_.classes[g_.elems[top].value].has(b)) {
      st.assign(in.data.begin() + begin, in.data.begin() + end);
      st.back() = top + 1;
      expand(st, out, 0, budget);
    }
    begin = end;
  }
  return !out.dead();
}

bool Recognizer::accepts_prefix(std::string_view text) const {
  ParseState a = initial(), b;
  for (char c : text) {
    if (!advance(a, uint8_t(c), b)) return false;
    std::swap(a, b);
  }
  return !a.dead();
}

bool Recognizer::accepts(std::string_view text) const {
  ParseState a = initial(), b;
  for (char c : text) {
    if (!advance(a, uint8_t(c), b)) return false;
    std::swap(a, b);
  }
  return a.complete;
}

}  // namespace kimi::structured
