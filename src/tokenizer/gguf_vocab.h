#pragma once
// The tokenizer as llama.cpp's "gpt2" (byte-level BPE) vocabulary: token texts in GPT-2's
// byte-to-unicode spelling, merge rules derived from the tiktoken ranks, and token types. This
// is how llama.cpp's converter describes Kimi's tiktoken vocabulary (pre-tokenizer "kimi-k2").
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kimi {

// llama.cpp's token types (llama_token_type / gguf TokenType).
enum class GgufTokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct GgufVocab {
  std::vector<std::string> tokens;  // index = token id
  std::vector<int32_t> types;       // GgufTokenType per id
  std::vector<std::string> merges;  // "left right", in priority order
};

// GPT-2's reversible byte-to-unicode spelling of raw bytes, as UTF-8.
std::string gpt2_byte_encode(std::string_view bytes);

// Base tokens are Normal, the special block Control; ids from the tokenizer's vocabulary up to
// vocab_size (the model's embedding rows, possibly more) are "[PAD<id>]" and Unused. A merge is
// the last step of BPE-encoding a token with only the merges of lower rank, so applying the
// merges in order rebuilds every token. Throws kimi::Error when vocab_size is smaller than the
// tokenizer's vocabulary or a token cannot be built from two lower-ranked ones.
GgufVocab gguf_vocab_from_tokenizer(const Tokenizer& tok, int64_t vocab_size);

}  // namespace kimi
