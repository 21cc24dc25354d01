#pragma once
// Byte-level BPE by ranks, as tiktoken does it: start from single bytes and repeatedly merge the
// adjacent pair whose concatenation is the vocabulary token of lowest rank (the leftmost such
// pair on ties) until no adjacent pair is a token. Short pieces use a small in-place scan;
// long ones a heap over a linked list, so that a piece of n bytes costs O(n log n), not O(n^2).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

class BytePairEncoder {
 public:
  BytePairEncoder() = default;
  // tokens[r] is the token of rank r. Tokens must be distinct and non-empty, and every single
  // byte must be a token (so that any input can be encoded); throws kimi::Error otherwise.
  explicit BytePairEncoder(std::span<const std::string> tokens);

  int32_t size() const { return int32_t(offsets_.empty() ? 0 : offsets_.size() - 1); }
  std::string_view token(int32_t rank) const {
    return std::string_view(blob_).substr(offsets_[size_t(rank)], offsets_[size_t(rank) + 1] - offsets_[size_t(rank)]);
  }
  std::optional<int32_t> rank(std::string_view bytes) const {
    const int32_t r = find(bytes);
    return r < 0 ? std::nullopt : std::optional<int32_t>(r);
  }

  // Appends the ranks of one piece's tokens to out.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  int32_t find(std::string_view bytes) const;  // -1 when not a token
  void merge_small(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_large(std::string_view piece, std::vector<int32_t>& out) const;

  std::string blob_;               // every token's bytes, back to back in rank order
  std::vector<uint32_t> offsets_;  // token r is blob_[offsets_[r], offsets_[r+1])
  // Open addressing table, power-of-two size: (hash tag, rank) slots, rank -1 = empty.
  struct Slot {
    uint32_t tag;
    int32_t rank;
  };
  std::vector<Slot> table_;
  uint64_t mask_ = 0;
  int32_t byte_rank_[256] = {};
};

}  // namespace kimi
