#pragma once
// The tiktoken BPE vocabulary file (`tiktoken.model`): text, one token per line,
// "<base64 of the token's bytes> <rank>". The rank is the token id and also the merge priority.
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

// Parses a tiktoken.model text. Returns the tokens' bytes indexed by rank. Ranks must be exactly
// 0..n-1 (any order), tokens non-empty and distinct. Errors are kimi::Error naming `source`
// (the file) and the 1-based line.
std::vector<std::string> parse_tiktoken(std::string_view text, const std::string& source);

// Reads and parses a tiktoken.model file.
std::vector<std::string> read_tiktoken_file(const std::filesystem::path& path);

// Writes tokens (index = rank) in the same format, lines in rank order.
void write_tiktoken_file(const std::filesystem::path& path, std::span<const std::string> tokens);

// Standard base64 (RFC 4648 alphabet, '=' padding), as the file uses.
std::string base64_encode(std::string_view bytes);

}  // namespace kimi
