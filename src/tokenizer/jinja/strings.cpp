#include "tokenizer/jinja/strings.h"

#include <algorithm>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace kimi::jinja::pystr {

namespace {
std::u32string u(std::string_view s) { return unicode::decode(s); }
std::string e(std::u32string_view s) { return unicode::encode(s); }
}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string d = u(s);
  const std::u32string set = chars ? u(*chars) : std::u32string();
  const auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : unicode::is_space(c); };
  size_t b = 0, end = d.size();
  if (left)
    while (b < end && strip_it(d[b])) ++b;
  if (right)
    while (end > b && strip_it(d[end - 1])) --end;
  return e(std::u32string_view(d).substr(b, end - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw BuiltinError("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  // Whitespace split: runs of whitespace separate, leading/trailing whitespace yields nothing.
  const std::u32string d = u(s);
  size_t i = 0;
  while (i < d.size()) {
    while (i < d.size() && unicode::is_space(d[i])) ++i;
    if (i >= d.size()) break;
    if (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) {
      size_t end = d.size();
      while (end > i && unicode::is_space(d[end - 1])) --end;
      out.push_back(e(std::u32string_view(d).substr(i, end - i)));
      return out;
    }
    size_t j = i;
    while (j < d.size() && !unicode::is_space(d[j])) ++j;
    out.push_back(e(std::u32string_view(d).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw BuiltinError("empty separator");
    size_t end = s.size();
    while (int64_t(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const std::u32string d = u(s);
  size_t j = d.size();
  while (j > 0) {
    while (j > 0 && unicode::is_space(d[j - 1])) --j;
    if (j == 0) break;
    if (int64_t(out.size()) >= maxsplit) {
      size_t b = 0;
      while (b < j && unicode::is_space(d[b])) ++b;
      out.push_back(e(std::u32string_view(d).substr(b, j - b)));
      break;
    }
    size_t i = j;
    while (i > 0 && !unicode::is_space(d[i - 1])) --i;
    out.push_back(e(std::u32string_view(d).substr(i, j - i)));
    j = i;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  const std::u32string d = u(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    if (!unicode::is_linebreak(d[i])) continue;
    size_t end = i + 1;
    if (d[i] == '\r' && i + 1 < d.size() && d[i + 1] == '\n') ++end;
    out.push_back(e(std::u32string_view(d).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < d.size()) out.push_back(e(std::u32string_view(d).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    const std::u32string d = u(s);
    int64_t n = 0;
    for (const char32_t c : d) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      unicode::append_utf8(out, c);
    }
    if (count < 0 || n < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += repl;
    pos = hit + old.size();
    ++n;
  }
  out += s.substr(pos);
  return out;
}

std::string capitalize(std::string_view s) {
  std::u32string d = u(s);
  for (size_t i = 0; i < d.size(); ++i) d[i] = i == 0 ? unicode::to_upper(d[i]) : unicode::to_lower(d[i]);
  return e(d);
}

std::string title(std::string_view s) {
  std::u32string d = u(s);
  bool prev_cased = false;
  for (char32_t& c : d) {
    const bool cased = unicode::is_upper(c) || unicode::is_lower(c);
    c = prev_cased ? unicode::to_lower(c) : unicode::to_upper(c);
    prev_cased = cased;
  }
  return e(d);
}

std::string swapcase(std::string_view s) {
  std::u32string d = u(s);
  for (char32_t& c : d) c = unicode::is_upper(c) ? unicode::to_lower(c) : unicode::to_upper(c);
  return e(d);
}

std::string jinja_title(std::string_view s) {
  // Pieces alternate between words and separator runs ([-\s({\[<]+); each piece gets its first
  // character upper-cased and the rest lower-cased.
  const std::u32string d = u(s);
  const auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || unicode::is_space(c);
  };
  std::u32string out;
  size_t i = 0;
  while (i < d.size()) {
    const bool sep = is_sep(d[i]);
    size_t j = i;
    while (j < d.size() && is_sep(d[j]) == sep) ++j;
    for (size_t k = i; k < j; ++k) out += k == i ? unicode::to_upper(d[k]) : unicode::to_lower(d[k]);
    i = j;
  }
  return e(out);
}

void check_width(int64_t width) {
  if (width > kMaxWidth) throw BuiltinError("width " + std::to_string(width) + " is too large");
}

std::string pad(std::string_view s, int64_t width, char32_t fill, int align) {
  check_width(width);
  const std::u32string d = u(s);
  const int64_t len = int64_t(d.size());
  if (width <= len) return std::string(s);
  const int64_t marg = width - len;
  int64_t left = 0;
  if (align == 1) left = marg;
  else if (align == 0) left = marg / 2 + (marg & width & 1);  // CPython's centring rule
  std::u32string out(size_t(left), fill);
  out += d;
  out.append(size_t(marg - left), fill);
  return e(out);
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return int64_t(unicode::length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
             bool reverse) {
  const std::u32string d = u(s);
  const std::u32string needle = u(sub);
  const auto len = int64_t(d.size());
  const auto norm = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + len : *v;
    return std::clamp<int64_t>(x, 0, len);
  };
  const int64_t b = norm(start, 0), en = norm(end, len);
  if (en - b < int64_t(needle.size())) return -1;
  const std::u32string_view window = std::u32string_view(d).substr(size_t(b), size_t(en - b));
  const size_t hit = reverse ? window.rfind(needle) : window.find(needle);
  return hit == std::u32string_view::npos ? -1 : b + int64_t(hit);
}

bool is_all(std::string_view s, bool (*pred)(char32_t)) {
  const std::u32string d = u(s);
  return !d.empty() && std::all_of(d.begin(), d.end(), pred);
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (const char32_t c : u(s)) {
    if (unicode::is_upper(c)) return false;
    if (unicode::is_lower(c)) cased = true;
  }
  return cased;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (const char32_t c : u(s)) {
    if (unicode::is_lower(c)) return false;
    if (unicode::is_upper(c)) cased = true;
  }
  return cased;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace kimi::jinja::pystr
