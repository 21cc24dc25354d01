#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "tokenizer/jinja/unicode.h"

namespace kimi::jinja {

namespace {

// Template source with every line break ("\r\n", "\r", "\n") as "\n", as Jinja2 reads it.
std::string normalize_newlines(std::string_view s, bool keep_trailing_newline) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Length of the Python-whitespace code point starting at s[i], or 0.
size_t space_at(std::string_view s, size_t i) {
  const auto b = uint8_t(s[i]);
  if (b < 0x80) return unicode::is_space(b) ? 1 : 0;
  size_t n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
  if (i + n > s.size()) return 0;
  const std::u32string c = unicode::decode(s.substr(i, n));
  return c.size() == 1 && unicode::is_space(c[0]) ? n : 0;
}

// Python's str.rstrip() on a UTF-8 string.
void rstrip_spaces(std::string& s) {
  const std::u32string d = unicode::decode(s);
  size_t end = d.size();
  while (end > 0 && unicode::is_space(d[end - 1])) --end;
  if (end != d.size()) s = unicode::encode(std::u32string_view(d).substr(0, end));
}

bool only_spaces(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    const size_t n = space_at(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& options)
      : src_(normalize_newlines(source, options.keep_trailing_newline)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const size_t text_start = pos_;
      if (tag == src_.size()) {
        emit_text(std::move(text), text_start);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char control = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      apply_left_whitespace(text, kind, control);
      emit_text(std::move(text), text_start);
      pos_ = tag + 2 + ((control == '-' || control == '+') ? 1 : 0);
      if (kind == '#') {
        lex_comment(tag);
      } else if (kind == '%' && is_raw_begin()) {
        lex_raw(tag);
      } else {
        lex_tag(tag, kind);
      }
    }
    push(TokenType::End, "", src_.size());
    return std::move(tokens_);
  }

 private:
  std::string src_;
  const LexOptions& opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the previous tag's match ended with a newline (Jinja2's lstrip rule)

  SourcePos position(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const auto line = size_t(it - line_starts_.begin());
    return {int(line), int(offset - line_starts_[line - 1]) + 1};
  }

  [[noreturn]] void fail(size_t offset, const std::string& msg) const {
    throw kimi::Error(error_prefix(opt_.name, position(offset)) + msg);
  }

  void push(TokenType type, std::string text, size_t offset) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.pos = position(offset);
    tokens_.push_back(std::move(t));
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) push(TokenType::Text, std::move(text), offset);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // "-" strips all whitespace before a tag; lstrip_blocks strips the indentation before a block or
  // comment tag that starts its line, unless the tag says "+".
  void apply_left_whitespace(std::string& text, char kind, char control) const {
    if (control == '-') {
      rstrip_spaces(text);
    } else if (control != '+' && opt_.lstrip_blocks && kind != '{') {
      lstrip_line(text);
    }
  }

  void lstrip_line(std::string& text) const {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && only_spaces(std::string_view(text).substr(l_pos))) text.resize(l_pos);
  }

  // After a tag: "-" eats all following whitespace; trim_blocks eats one newline after block and
  // comment tags unless the tag ends with "+".
  void apply_right_whitespace(char control, bool block_like) {
    const size_t start = pos_;
    if (control == '-') {
      while (pos_ < src_.size()) {
        const size_t n = space_at(src_, pos_);
        if (!n) break;
        pos_ += n;
      }
    } else if (control != '+' && block_like && opt_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > start && src_[pos_ - 1] == '\n';
  }

  void lex_comment(size_t tag) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(tag, "unclosed comment: missing '#}'");
    char control = '\0';
    if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) control = src_[end - 1];
    pos_ = end + 2;
    apply_right_whitespace(control, true);
  }

  bool is_raw_begin() const {
    size_t i = pos_;
    while (i < src_.size() && is_ascii_space(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    if (i < src_.size() && (std::isalnum(uint8_t(src_[i])) || src_[i] == '_')) return false;
    while (i < src_.size() && is_ascii_space(src_[i])) ++i;
    return src_.compare(i, 2, "%}") == 0 || src_.compare(i, 3, "-%}") == 0;
  }

  void lex_raw(size_t tag) {
    // Opening tag: "{% raw %}" or "{% raw -%}" (Jinja2 applies no trim_blocks here).
    size_t i = src_.find("%}", pos_);
    const bool minus = src_[i - 1] == '-';
    pos_ = i + 2;
    apply_right_whitespace(minus ? '-' : '+', true);
    // Body: everything up to "{% endraw %}" (with optional -/+ markers and spaces).
    const size_t body_start = pos_;
    for (size_t j = src_.find("{%", pos_); j != std::string::npos; j = src_.find("{%", j + 1)) {
      size_t k = j + 2;
      const char control = k < src_.size() ? src_[k] : '\0';
      if (control == '-' || control == '+') ++k;
      while (k < src_.size() && is_ascii_space(src_[k])) ++k;
      if (src_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      while (k < src_.size() && is_ascii_space(src_[k])) ++k;
      char end_control = '\0';
      if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) end_control = src_[k++];
      if (src_.compare(k, 2, "%}") != 0) continue;
      std::string body = src_.substr(body_start, j - body_start);
      apply_left_whitespace(body, '%', control);
      emit_text(std::move(body), body_start);
      pos_ = k + 2;
      apply_right_whitespace(end_control, true);
      return;
    }
    fail(tag, "unclosed '{% raw %}': missing '{% endraw %}'");
  }

  void lex_tag(size_t tag, char kind) {
    const bool block = kind == '%';
    push(block ? TokenType::BlockBegin : TokenType::VarBegin, "", tag);
    std::vector<char> brackets;
    while (true) {
      while (pos_ < src_.size() && is_ascii_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size())
        fail(tag, std::string("unclosed tag: missing '") + (block ? "%}" : "}}") + "'");
      if (brackets.empty() && end_of_tag(block)) return;
      const char c = src_[pos_];
      if (c == '"' || c == '\'') {
        lex_string();
      } else if (std::isdigit(uint8_t(c))) {
        lex_number();
      } else if (std::isalpha(uint8_t(c)) || c == '_') {
        const size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(uint8_t(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        push(TokenType::Name, src_.substr(start, pos_ - start), start);
      } else {
        lex_operator(brackets);
      }
    }
  }

  bool end_of_tag(bool block) {
    const char close = block ? '%' : '}';
    char control = '\0';
    size_t i = pos_;
    if (src_[i] == '-' || (block && src_[i] == '+')) control = src_[i++];
    if (i + 1 < src_.size() && src_[i] == close && src_[i + 1] == '}') {
      push(block ? TokenType::BlockEnd : TokenType::VarEnd, "", pos_);
      pos_ = i + 2;
      apply_right_whitespace(control, block);
      return true;
    }
    return false;
  }

  void lex_operator(std::vector<char>& brackets) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    const size_t start = pos_;
    for (const std::string_view op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        pos_ += 2;
        push(TokenType::Operator, std::string(op), start);
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-*/%~()[]{}<>=.:|,").find(c) == std::string_view::npos) {
      fail(start, std::string("unexpected character '") + c + "' in tag");
    }
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != open) fail(start, std::string("unexpected '") + c + "'");
      brackets.pop_back();
    }
    ++pos_;
    push(TokenType::Operator, std::string(1, c), start);
  }

  void lex_number() {
    const size_t start = pos_;
    const auto digits = [&](bool hex) {
      std::string out;
      while (pos_ < src_.size() &&
             (std::isdigit(uint8_t(src_[pos_])) || (hex && std::isxdigit(uint8_t(src_[pos_]))) ||
              (src_[pos_] == '_' && pos_ + 1 < src_.size() && std::isxdigit(uint8_t(src_[pos_ + 1]))))) {
        if (src_[pos_] != '_') out += src_[pos_];
        ++pos_;
      }
      return out;
    };
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() && std::string_view("xXoObB").find(src_[pos_ + 1]) != std::string_view::npos) {
      const char base_char = char(std::tolower(uint8_t(src_[pos_ + 1])));
      pos_ += 2;
      const std::string d = digits(base_char == 'x');
      const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
      int64_t v = 0;
      const auto r = std::from_chars(d.data(), d.data() + d.size(), v, base);
      if (d.empty() || r.ec != std::errc() || r.ptr != d.data() + d.size()) fail(start, "invalid integer literal");
      push(TokenType::Integer, src_.substr(start, pos_ - start), start);
      tokens_.back().int_value = v;
      return;
    }
    std::string text = digits(false);
    bool is_float = false;
    // "1.5" is a float, but in "x.0.1" the digits after a dot are item indices (Jinja2 rule).
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(uint8_t(src_[pos_ + 1]))) {
      ++pos_;
      text += '.' + digits(false);
      is_float = true;
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t k = pos_ + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(uint8_t(src_[k]))) {
        text += 'e';
        if (src_[pos_ + 1] == '-') text += '-';
        pos_ = k;
        text += digits(false);
        is_float = true;
      }
    }
    if (is_float) {
      push(TokenType::Float, text, start);
      tokens_.back().float_value = std::strtod(text.c_str(), nullptr);
    } else {
      int64_t v = 0;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
      if (r.ec != std::errc()) fail(start, "integer literal out of the 64-bit range");
      push(TokenType::Integer, text, start);
      tokens_.back().int_value = v;
    }
  }

  void lex_string() {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) fail(start, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) fail(start, "unterminated string literal");
      const char e = src_[pos_++];
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'x': unicode::append_utf8(out, hex_escape(2, start)); break;
        case 'u': unicode::append_utf8(out, hex_escape(4, start)); break;
        case 'U': unicode::append_utf8(out, hex_escape(8, start)); break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = char32_t(e - '0');
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
              v = v * 8 + char32_t(src_[pos_++] - '0');
            unicode::append_utf8(out, v);
          } else {
            out += '\\';  // unknown escapes stay as written, as in Python
            out += e;
          }
      }
    }
    push(TokenType::String, std::move(out), start);
  }

  char32_t hex_escape(int n, size_t start) {
    if (pos_ + size_t(n) > src_.size()) fail(start, "truncated \\x/\\u/\\U escape in string literal");
    uint32_t v = 0;
    const auto r = std::from_chars(src_.data() + pos_, src_.data() + pos_ + n, v, 16);
    if (r.ec != std::errc() || r.ptr != src_.data() + pos_ + n || v > 0x10FFFF)
      fail(start, "invalid \\x/\\u/\\U escape in string literal");
    pos_ += size_t(n);
    return char32_t(v);
  }
};

}  // namespace

std::string error_prefix(const std::string& name, SourcePos pos) {
  return name + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": ";
}

std::vector<Token> tokenize(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace kimi::jinja
