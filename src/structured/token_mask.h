#pragma once
// Token masks: which vocabulary tokens may come next under a grammar. TokenVocab holds the
// tokens' bytes as a byte trie in preorder (shared prefixes are walked once; a rejected prefix
// skips its whole subtree); GrammarMatcher is one request's position in its grammar, computing
// the mask of its state (cached per state: inside a string or a repeated structure the state
// recurs, and a hit costs one hash lookup) and advancing by the sampled token.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/matcher.h"

namespace kimi {
class Tokenizer;
}

namespace kimi::structured {

class TokenVocab {
 public:
  // bytes[id]: the token's bytes; special tokens are listed in `special` and stand in the trie
  // as special_token_bytes(id) (allowed only where a grammar asks for that token). Ordinary
  // tokens holding a 0xFF byte (never valid UTF-8) are left out. vocab_size may exceed
  // bytes.size() (padded rows).
  TokenVocab(const std::vector<std::string>& bytes, const std::vector<bool>& special, int64_t vocab_size);
  static std::shared_ptr<const TokenVocab> from_tokenizer(const Tokenizer& tok, int64_t vocab_size);

  int64_t size() const { return vocab_size_; }
  size_t words() const { return size_t((vocab_size_ + 63) / 64); }
  // What the grammar sees of token id (special_token_bytes for a special token).
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  size_t token_count() const { return bytes_.size(); }
  bool is_special(int32_t id) const { return id < 0 || size_t(id) >= bytes_.size() || special_[size_t(id)]; }

  struct Node {
    uint8_t byte;
    uint32_t depth;      // bytes from the root (1 for a first byte)
    uint32_t skip;       // the index after this node's subtree
    uint32_t tok_begin;  // tokens ending here: token_ids_[tok_begin, tok_end)
    uint32_t tok_end;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  uint32_t max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> special_;
  int64_t vocab_size_;
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  uint32_t max_depth_ = 0;
};

class GrammarMatcher {
 public:
  // end_ids: the tokens that end the sequence (eos, <|im_end|>): allowed only when the text so
  // far is complete, and then the only tokens allowed once the grammar cannot go on.
  GrammarMatcher(std::shared_ptr<const Recognizer> rec, std::shared_ptr<const TokenVocab> vocab,
                 std::vector<int32_t> end_ids);

  // mask: vocab.words() words, bit id set when token id is allowed next. Never all zero: at a
  // dead end (no token continues the grammar) the end tokens are allowed.
  const std::vector<uint64_t>& mask();
  // Advances by a token. False (state unchanged) when the grammar does not allow it.
  bool accept_token(int32_t id);
  bool is_complete() const { return state_.complete; }
  bool can_continue() const { return state_.can_continue(); }
  bool finished() const { return finished_; }  // an end token was accepted

  size_t cache_hits() const { return hits_; }
  size_t cache_misses() const { return misses_; }

 private:
  void compute(std::vector<uint64_t>& out);

  std::shared_ptr<const Recognizer> rec_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<int32_t> end_ids_;
  ParseState state_;
  bool finished_ = false;
  std::vector<ParseState> levels_;  // trie-walk scratch, one state per depth
  std::unordered_map<std::string, std::vector<uint64_t>> cache_;
  std::vector<uint64_t> current_;
  size_t hits_ = 0, misses_ = 0;
};

}  // namespace kimi::structured
