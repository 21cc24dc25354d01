#include "structured/charset.h"

#include <algorithm>

namespace kimi::structured {

void CharSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) std::swap(lo, hi);
  ranges_.push_back({lo, std::min(hi, kMaxCodePoint)});
  normalize();
}

void CharSet::add(const CharSet& o) {
  ranges_.insert(ranges_.end(), o.ranges_.begin(), o.ranges_.end());
  normalize();
}

void CharSet::normalize() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& r : ranges_) {
    if (!out.empty() && r.first <= out.back().second + 1) out.back().second = std::max(out.back().second, r.second);
    else out.push_back(r);
  }
  ranges_ = std::move(out);
}

CharSet CharSet::complement() const {
  CharSet c;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) c.ranges_.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) c.ranges_.push_back({next, kMaxCodePoint});
  return c;
}

CharSet CharSet::minus(const CharSet& o) const {
  CharSet oc = o.complement(), r;
  for (const auto& a : ranges_)
    for (const auto& b : oc.ranges_) {
      const uint32_t lo = std::max(a.first, b.first), hi = std::min(a.second, b.second);
      if (lo <= hi) r.ranges_.push_back({lo, hi});
    }
  r.normalize();
  return r;
}

bool CharSet::contains(uint32_t cp) const {
  for (const auto& [lo, hi] : ranges_)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

uint32_t utf8_decode(std::string_view s, size_t& i) {
  const auto b0 = uint8_t(s[i]);
  int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + size_t(n) > s.size()) {
    ++i;
    return b0;
  }
  uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto b = uint8_t(s[i + size_t(k)]);
    if ((b >> 6) != 2) {
      ++i;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += size_t(n);
  return cp;
}

namespace {

// Byte-class sequences for all encodings between lo and hi (same length), position i onwards.
void split(GrammarBuilder& b, const std::string& lo, const std::string& hi, size_t i, Seq prefix,
           std::vector<Seq>& out) {
  const size_t n = lo.size();
  auto range = [&](uint8_t a, uint8_t z) {
    ByteClass c;
    c.set_range(a, z);
    return b.cls(c);
  };
  if (i == n - 1) {
    prefix.push_back(range(uint8_t(lo[i]), uint8_t(hi[i])));
    out.push_back(std::move(prefix));
    return;
  }
  if (lo[i] == hi[i]) {
    prefix.push_back(b.byte(uint8_t(lo[i])));
    split(b, lo, hi, i + 1, std::move(prefix), out);
    return;
  }
  const std::string min_tail(n - i - 1, char(0x80)), max_tail(n - i - 1, char(0xBF));
  uint8_t mid_lo = uint8_t(lo[i]), mid_hi = uint8_t(hi[i]);
  if (lo.substr(i + 1) != min_tail) {
    Seq p = prefix;
    p.push_back(b.byte(uint8_t(lo[i])));
    std::string hi2 = lo.substr(0, i + 1) + max_tail;
    split(b, lo, hi2, i + 1, std::move(p), out);
    ++mid_lo;
  }
  bool hi_partial = hi.substr(i + 1) != max_tail;
  if (hi_partial) --mid_hi;
  if (mid_lo <= mid_hi) {
    Seq p = prefix;
    p.push_back(range(mid_lo, mid_hi));
    for (size_t k = i + 1; k < n; ++k) p.push_back(range(0x80, 0xBF));
    out.push_back(std::move(p));
  }
  if (hi_partial) {
    Seq p = prefix;
    p.push_back(b.byte(uint8_t(hi[i])));
    std::string lo2 = hi.substr(0, i + 1) + min_tail;
    split(b, lo2, hi, i + 1, std::move(p), out);
  }
}

}  // namespace

Sym CharSet::compile(GrammarBuilder& b, bool json_string) const {
  CharSet set = *this;
  CharSet surrogates;
  surrogates.add(0xD800, 0xDFFF);
  set = set.minus(surrogates);
  std::vector<Seq> alts;
  if (json_string) {
    CharSet special;
    special.add(0, 0x1F);
    special.add('"');
    special.add('\\');
    for (auto [cp, esc] : {std::pair<uint32_t, const char*>{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"}, {'\t', "\\t"}})
      if (set.contains(cp)) {
        Seq s;
        b.append_literal(s, esc);
        alts.push_back(std::move(s));
      }
    set = set.minus(special);
  }
  ByteClass ascii;
  for (const auto& [lo, hi] : set.ranges()) {
    if (lo < 0x80) ascii.set_range(uint8_t(lo), uint8_t(std::min<uint32_t>(hi, 0x7F)));
    static constexpr uint32_t bounds[][2] = {{0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (const auto& bd : bounds) {
      const uint32_t a = std::max(lo, bd[0]), z = std::min(hi, bd[1]);
      if (a <= z) split(b, utf8_encode(a), utf8_encode(z), 0, {}, alts);
    }
  }
  if (!ascii.empty()) alts.push_back({b.cls(ascii)});
  if (alts.empty()) throw GrammarError("a character class that matches nothing");
  if (alts.size() == 1 && alts[0].size() == 1 && !alts[0][0].is_rule) return alts[0][0];
  return b.alts(std::move(alts), "chars");
}

}  // namespace kimi::structured
