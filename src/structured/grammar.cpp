#include "structured/grammar.h"


namespace kimi::structured {

std::string special_token_bytes(int32_t id) {
  const auto u = uint32_t(id);
  return {char(0xFF), char((u >> 16) & 0xFF), char((u >> 8) & 0xFF), char(u & 0xFF)};
}

void GrammarBuilder::charge(size_t n) {
  total_ += n;
  if (total_ > kMaxElements) throw GrammarError("the grammar is too large (more than " + std::to_string(kMaxElements) + " elements)");
}

uint32_t GrammarBuilder::new_rule(std::string name) {
  if (alts_.size() >= kMaxRules) throw GrammarError("the grammar is too large (more than " + std::to_string(kMaxRules) + " rules)");
  alts_.emplace_back();
  names_.push_back(std::move(name));
  return uint32_t(alts_.size() - 1);
}

void GrammarBuilder::add_alt(uint32_t rule, Seq alt) {
  charge(alt.size() + 1);
  alts_[rule].push_back(std::move(alt));
}

Sym GrammarBuilder::cls(const ByteClass& c) {
  auto [it, fresh] = class_ids_.try_emplace(c, uint32_t(classes_.size()));
  if (fresh) classes_.push_back(c);
  return {false, it->second};
}

Sym GrammarBuilder::byte(uint8_t b) {
  ByteClass c;
  c.set(b);
  return cls(c);
}

void GrammarBuilder::append_literal(Seq& s, std::string_view bytes) {
  for (char ch : bytes) s.push_back(byte(uint8_t(ch)));
}

Sym GrammarBuilder::alts(std::vector<Seq> alternatives, const std::string& hint) {
  const uint32_t r = new_rule(hint);
  for (Seq& a : alternatives) add_alt(r, std::move(a));
  return ref(r);
}

Sym GrammarBuilder::literal(std::string_view bytes) {
  Seq s;
  append_literal(s, bytes);
  return seq(std::move(s));
}

Sym GrammarBuilder::empty() {
  if (empty_rule_ == UINT32_MAX) {
    empty_rule_ = new_rule("empty");
    add_alt(empty_rule_, {});
  }
  return ref(empty_rule_);
}

Sym GrammarBuilder::repeat(Sym x, int64_t min, int64_t max) {
  if (min < 0 || (max >= 0 && max < min)) throw GrammarError("a repetition with bounds {" + std::to_string(min) + "," + std::to_string(max) + "}");
  if (min > int64_t(kMaxElements) || max > int64_t(kMaxElements)) throw GrammarError("a repetition bound above " + std::to_string(kMaxElements));
  Sym tail;
  if (max < 0) {  // star: R ::= x R | ""
    const uint32_t r = new_rule("star");
    add_alt(r, {x, ref(r)});
    add_alt(r, {});
    tail = ref(r);
  } else {  // up to (max - min) more: R_k ::= x R_{k-1} | ""
    tail = empty();
    for (int64_t k = 0; k < max - min; ++k) {
      const uint32_t r = new_rule("upto");
      add_alt(r, {x, tail});
      add_alt(r, {});
      tail = ref(r);
    }
  }
  if (min == 0) return tail;
  Seq s(size_t(min), x);
  s.push_back(tail);
  return seq(std::move(s));
}

Sym GrammarBuilder::utf8_char(const ByteClass& allowed_ascii) {
  ByteClass cont, lead2, lead3, lead4;
  cont.set_range(0x80, 0xBF);
  lead2.set_range(0xC2, 0xDF);
  const Sym c = cls(cont);
  ByteClass e0, ed, e_rest, f0, f4, f_rest, a0bf, x809f, x90bf, x808f;
  a0bf.set_range(0xA0, 0xBF);
  x809f.set_range(0x80, 0x9F);
  x90bf.set_range(0x90, 0xBF);
  x808f.set_range(0x80, 0x8F);
  e_rest.set_range(0xE1, 0xEC);
  e_rest.set_range(0xEE, 0xEF);
  f_rest.set_range(0xF1, 0xF3);
  // Well-formed UTF-8 only (no overlongs, no surrogates, nothing above U+10FFFF), so that the
  // output is always valid text.
  std::vector<Seq> a;
  a.push_back({cls(allowed_ascii)});
  a.push_back({cls(lead2), c});
  a.push_back({byte(0xE0), cls(a0bf), c});
  a.push_back({cls(e_rest), c, c});
  a.push_back({byte(0xED), cls(x809f), c});
  a.push_back({byte(0xF0), cls(x90bf), c, c});
  a.push_back({cls(f_rest), c, c, c});
  a.push_back({byte(0xF4), cls(x808f), c, c});
  if (allowed_ascii.empty()) a.erase(a.begin());
  return alts(std::move(a), "utf8");
}

Grammar GrammarBuilder::build(uint32_t root) const {
  const size_t n = alts_.size();
  for (size_t r = 0; r < n; ++r)
    if (alts_[r].empty()) throw GrammarError("rule '" + names_[r] + "' is not defined");
  // Nullable rules (fixpoint), then the "can start with" relation: a rule that can reach itself
  // without consuming a byte would loop a top-down recognizer forever.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& a : alts_[r]) {
        bool all = true;
        for (const Sym& s : a)
          if (!s.is_rule || !nullable[s.index]) { all = false; break; }
        if (all) { nullable[r] = 1; changed = true; break; }
      }
    }
  }
  std::vector<char> color(n, 0);  // 0 new, 1 on the path, 2 done
  auto left_refs = [&](uint32_t r) {
    std::vector<uint32_t> out;
    for (const Seq& a : alts_[r])
      for (const Sym& s : a) {
        if (!s.is_rule) break;
        out.push_back(s.index);
        if (!nullable[s.index]) break;
      }
    return out;
  };
  for (uint32_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<uint32_t, std::vector<uint32_t>>> path;
    path.push_back({start, left_refs(start)});
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, refs] = path.back();
      if (refs.empty()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t next = refs.back();
      refs.pop_back();
      if (color[next] == 1)
        throw GrammarError("rule '" + names_[next] + "' is left-recursive (it can reach itself without consuming input, "
                           "e.g. a repetition of something that can be empty)");
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back({next, left_refs(next)});
      }
    }
  }

  Grammar g;
  g.classes = classes_;
  g.rule_names = names_;
  g.root = root;
  g.rule_alts.resize(n);
  g.elems.reserve(total_);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& a : alts_[r]) {
      g.rule_alts[r].push_back(uint32_t(g.elems.size()));
      for (const Sym& s : a) g.elems.push_back({s.is_rule ? Element::Rule : Element::Bytes, s.index});
      g.elems.push_back({Element::End, 0});
    }
  return g;
}

}  // namespace kimi::structured
