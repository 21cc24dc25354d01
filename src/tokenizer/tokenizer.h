#pragma once
// The Kimi tokenizer (tokenization_kimi.py's TikTokenTokenizer): tiktoken byte-level BPE over
// `tiktoken.model`, the Kimi pre-tokeniser pattern, and a block of 256 special tokens right after
// the base vocabulary, named from tokenizer_config.json's added_tokens_decoder or else
// `<|reserved_token_{id}|>`.
//
// encode() reproduces the Python encode: the text is cut into 400,000-character chunks, each
// chunk into slices with no run of more than 25,000 whitespace or non-whitespace characters
// (Python str.isspace), and each slice is encoded on its own (tiktoken, allowed_special="all"
// when specials are allowed). Bytes that are not valid UTF-8 are kept, see pretokenizer.h, and
// count as one non-space character each for the chunking.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace kimi {

class Tokenizer {
 public:
  static constexpr int32_t kNumSpecialTokens = 256;
  static constexpr size_t kMaxEncodeChars = 400'000;  // TIKTOKEN_MAX_ENCODE_CHARS
  static constexpr size_t kMaxRunChars = 25'000;      // MAX_NO_WHITESPACES_CHARS

  // Reads model_dir/tiktoken.model and, when present, model_dir/tokenizer_config.json
  // (added_tokens_decoder, bos_token, eos_token, chat_template) and model_dir/chat_template.jinja
  // (which takes precedence over the config's chat_template). Throws kimi::Error naming the file.
  static Tokenizer load(const std::filesystem::path& model_dir);

  // From parts: base_tokens[id] is the token of that id (= rank); special_names maps ids of the
  // special block [base_tokens.size(), +256) to their text. bos/eos name special tokens or are
  // empty (then bos_id()/eos_id() are -1).
  Tokenizer(std::vector<std::string> base_tokens, const std::map<int32_t, std::string>& special_names,
            const std::string& bos_token = "", const std::string& eos_token = "", std::string chat_template = "");

  // Special tokens written in the text become their ids when allow_special (tiktoken's
  // allowed_special="all"; of two specials starting at one place the longer wins), else the
  // text is encoded as ordinary text.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // The bytes of the tokens, concatenated (not necessarily valid UTF-8: a character may be split
  // across tokens). Specials decode to their text unless skipped. Bad ids throw kimi::Error.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  // What encode() encodes, in order: the pre-tokeniser's pieces and the special tokens written
  // in the text, as views into text (one token id per special; BPE turns each piece into ids).
  std::vector<std::string_view> split(std::string_view text, bool allow_special = true) const;

  int32_t vocab_size() const { return num_base_ + kNumSpecialTokens; }
  int32_t num_base_tokens() const { return num_base_; }
  std::optional<int32_t> token_id(std::string_view special_token_text) const;  // specials only
  bool is_special(int32_t id) const { return id >= num_base_ && id < vocab_size(); }
  std::string_view token_bytes(int32_t id) const;  // throws kimi::Error when out of range
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  const std::string& chat_template() const { return chat_template_; }
  const PreTokenizer& pre_tokenizer() const { return pretok_; }

  // The slices encode() encodes independently (the chunking rules above), views into text.
  static std::vector<std::string_view> encode_slices(std::string_view text);

 private:
  template <class OnPiece, class OnSpecial>
  void walk(std::string_view text, bool allow_special, OnPiece&& on_piece, OnSpecial&& on_special) const;
  // Longest special token starting at text[pos], or -1.
  int32_t match_special(std::string_view text, size_t pos, size_t& len) const;

  BytePairEncoder bpe_;
  PreTokenizer pretok_;
  int32_t num_base_ = 0;
  std::vector<std::string> special_text_;  // index: id - num_base_
  std::unordered_map<std::string, int32_t> special_ids_;
  // A byte trie of the special tokens' texts, for finding them in the input in one pass.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> kids;  // (byte, node), sorted by byte
    int32_t id = -1;
  };
  std::vector<TrieNode> trie_;
  bool special_first_byte_[256] = {};
  int32_t bos_id_ = -1, eos_id_ = -1;
  std::string chat_template_;
};

// Names of Kimi-K2.5's special tokens, by offset from the first special id (163584 in the real
// vocabulary); the other offsets are reserved. For writing generated model directories.
const std::map<int32_t, std::string>& kimi_k25_special_token_names();
// A tokenizer_config.json for a vocabulary of num_base_tokens base tokens followed by the K2.5
// special block (added_tokens_decoder, bos/eos/unk/pad tokens, the tokenizer class fields).
nlohmann::json kimi_tokenizer_config(int32_t num_base_tokens);

}  // namespace kimi
