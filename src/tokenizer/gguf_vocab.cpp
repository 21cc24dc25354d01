#include "tokenizer/gguf_vocab.h"

#include <array>

#include "common/error.h"
#include "tokenizer/bpe.h"

namespace kimi {

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// GPT-2's table: printable Latin-1 bytes stand for themselves, the other 68 bytes are moved to
// code points 256, 257, ... in byte order.
std::array<std::string, 256> make_byte_table() {
  std::array<std::string, 256> t;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    append_utf8(t[b], printable ? b : next++);
  }
  return t;
}

// The two tokens whose merge is the last BPE step that builds `token` (rank r): BPE over its
// bytes, allowing only merges that make tokens of rank < r.
std::pair<std::string_view, std::string_view> last_merge(const BytePairEncoder& bpe, std::string_view token,
                                                         int32_t r) {
  std::vector<std::string_view> parts;
  for (size_t i = 0; i < token.size(); ++i) parts.push_back(token.substr(i, 1));
  for (;;) {
    int32_t best = -1;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::string_view joined(parts[i].data(), parts[i].size() + parts[i + 1].size());
      const auto rank = bpe.rank(joined);
      if (rank && *rank < r && (best < 0 || *rank < best)) {
        best = *rank;
        best_i = i;
      }
    }
    if (best < 0) break;
    parts[best_i] = std::string_view(parts[best_i].data(), parts[best_i].size() + parts[best_i + 1].size());
    parts.erase(parts.begin() + ptrdiff_t(best_i) + 1);
  }
  if (parts.size() != 2)
    throw Error("tokenizer: token of rank " + std::to_string(r) + " is not the merge of two lower-ranked tokens");
  return {parts[0], parts[1]};
}

}  // namespace

std::string gpt2_byte_encode(std::string_view bytes) {
  static const std::array<std::string, 256> table = make_byte_table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += table[uint8_t(c)];
  return out;
}

GgufVocab gguf_vocab_from_tokenizer(const Tokenizer& tok, int64_t vocab_size) {
  if (vocab_size < tok.vocab_size())
    throw Error("vocab_size " + std::to_string(vocab_size) + " is smaller than the tokenizer's " +
                std::to_string(tok.vocab_size()) + " tokens");
  const int32_t n_base = tok.num_base_tokens();
  std::vector<std::string> base(static_cast<size_t>(n_base));
  for (int32_t i = 0; i < n_base; ++i) base[size_t(i)] = std::string(tok.token_bytes(i));
  const BytePairEncoder bpe(base);

  GgufVocab v;
  v.tokens.reserve(size_t(vocab_size));
  v.types.reserve(size_t(vocab_size));
  for (int32_t i = 0; i < n_base; ++i) {
    v.tokens.push_back(gpt2_byte_encode(base[size_t(i)]));
    v.types.push_back(int32_t(GgufTokenType::Normal));
    if (base[size_t(i)].size() < 2) continue;
    const auto [left, right] = last_merge(bpe, base[size_t(i)], i);
    v.merges.push_back(gpt2_byte_encode(left) + " " + gpt2_byte_encode(right));
  }
  for (int32_t i = n_base; i < tok.vocab_size(); ++i) {
    v.tokens.emplace_back(tok.token_bytes(i));  // special tokens keep their text as it is
    v.types.push_back(int32_t(GgufTokenType::Control));
  }
  for (int64_t i = tok.vocab_size(); i < vocab_size; ++i) {
    v.tokens.push_back("[PAD" + std::to_string(i) + "]");
    v.types.push_back(int32_t(GgufTokenType::Unused));
  }
  return v;
}

}  // namespace kimi
