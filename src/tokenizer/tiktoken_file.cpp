#include "tokenizer/tiktoken_file.h"

#include <charconv>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "common/error.h"

namespace kimi {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Strict decoding: whole 4-character groups, padding only at the end, zero unused bits. Returns
// false on anything else, so that a corrupt file is reported rather than silently misread.
bool base64_decode(std::string_view s, std::string& out) {
  out.clear();
  if (s.empty() || s.size() % 4 != 0) return false;
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + size_t(k)];
      if (c == '=' && last && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad) return false;  // data after padding
      v[k] = b64_value(c);
      if (v[k] < 0) return false;
    }
    const uint32_t n = uint32_t(v[0]) << 18 | uint32_t(v[1]) << 12 | uint32_t(v[2]) << 6 | uint32_t(v[3]);
    out += char(n >> 16);
    if (pad == 2) {
      if (n & 0xFFFF) return false;
      break;
    }
    out += char((n >> 8) & 0xFF);
    if (pad == 1) {
      if (n & 0xFF) return false;
      break;
    }
    out += char(n & 0xFF);
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 60)) {
    if (c >= 0x20 && c < 0x7F) {
      out += c;
    } else {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[uint8_t(c) >> 4];
      out += hex[uint8_t(c) & 15];
    }
  }
  if (s.size() > 60) out += "...";
  return out;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (i < bytes.size()) {
    uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::vector<std::string> parse_tiktoken(std::string_view text, const std::string& source) {
  struct Entry {
    std::string bytes;
    int64_t rank;
    size_t line;
  };
  std::vector<Entry> entries;
  std::unordered_map<std::string_view, size_t> line_of_token;  // views into entries' strings
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const auto where = [&] { return source + ":" + std::to_string(line_no) + ": "; };
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      throw Error(where() + "expected '<base64> <rank>', got '" + printable(line) + "'");
    const std::string_view b64 = line.substr(0, sp), rank_text = line.substr(sp + 1);
    Entry e{{}, -1, line_no};
    if (!base64_decode(b64, e.bytes)) throw Error(where() + "invalid base64 '" + printable(b64) + "'");
    const auto [p, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), e.rank);
    if (ec != std::errc() || p != rank_text.data() + rank_text.size() || e.rank < 0 ||
        e.rank >= std::numeric_limits<int32_t>::max())
      throw Error(where() + "invalid rank '" + printable(rank_text) + "'");
    entries.push_back(std::move(e));
  }
  if (entries.empty()) throw Error(source + ": no tokens");
  // Reserve up front: the map holds views into the entries' strings.
  line_of_token.reserve(entries.size());
  std::vector<size_t> line_of_rank(entries.size(), 0);
  for (const Entry& e : entries) {
    const auto where = source + ":" + std::to_string(e.line) + ": ";
    if (size_t(e.rank) >= entries.size())
      throw Error(where + "rank " + std::to_string(e.rank) + " is out of range: the file has " +
                  std::to_string(entries.size()) + " tokens and ranks must be 0..n-1");
    if (line_of_rank[size_t(e.rank)])
      throw Error(where + "rank " + std::to_string(e.rank) + " already given on line " +
                  std::to_string(line_of_rank[size_t(e.rank)]));
    line_of_rank[size_t(e.rank)] = e.line;
    const auto [it, fresh] = line_of_token.emplace(e.bytes, e.line);
    if (!fresh)
      throw Error(where + "token '" + printable(e.bytes) + "' already given on line " + std::to_string(it->second));
  }
  // n distinct ranks all below n: every rank 0..n-1 is present.
  std::vector<std::string> by_rank(entries.size());
  for (Entry& e : entries) by_rank[size_t(e.rank)] = std::move(e.bytes);
  return by_rank;
}

std::vector<std::string> read_tiktoken_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error("cannot read " + path.string());
  return parse_tiktoken(ss.str(), path.string());
}

void write_tiktoken_file(const std::filesystem::path& path, std::span<const std::string> tokens) {
  std::string text;
  for (size_t r = 0; r < tokens.size(); ++r) {
    if (tokens[r].empty()) throw Error("write_tiktoken_file: token " + std::to_string(r) + " is empty");
    text += base64_encode(tokens[r]);
    text += ' ';
    text += std::to_string(r);
    text += '\n';
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("cannot create " + path.string());
  f.write(text.data(), std::streamsize(text.size()));
  f.close();
  if (!f) throw Error("cannot write " + path.string());
}

}  // namespace kimi
