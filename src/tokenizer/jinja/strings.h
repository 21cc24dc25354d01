#pragma once
// Python str methods that filters and str methods share, on UTF-8 strings by code point.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kimi::jinja::pystr {

// Padding/indent widths past this are refused instead of allocating gigabytes.
inline constexpr int64_t kMaxWidth = int64_t(1) << 26;
// Throws BuiltinError when `width` exceeds kMaxWidth.
void check_width(int64_t width);

// str.strip/lstrip/rstrip: `chars` null strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and str.rsplit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
std::string capitalize(std::string_view s);     // str.capitalize
std::string title(std::string_view s);          // str.title
std::string swapcase(std::string_view s);
std::string jinja_title(std::string_view s);    // Jinja2's `title` filter (words split at spaces, -, brackets)
std::string pad(std::string_view s, int64_t width, char32_t fill, int align);  // align -1 ljust, 0 center, 1 rjust
int64_t count(std::string_view s, std::string_view sub);
// str.find on code point positions; -1 when absent. `start`/`end` are Python slice bounds.
int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end, bool reverse);
bool is_all(std::string_view s, bool (*pred)(char32_t));
bool is_lower(std::string_view s);  // str.islower
bool is_upper(std::string_view s);  // str.isupper
std::string html_escape(std::string_view s);

}  // namespace kimi::jinja::pystr
