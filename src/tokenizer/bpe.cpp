#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <queue>

#include "common/error.h"

namespace kimi {

namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();

// A fast hash for the short strings BPE looks up: 8 bytes at a time, then a final mix.
inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(n) * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
    h = (h ^ v) * 0x94D049BB133111EBull;
  }
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

}  // namespace

BytePairEncoder::BytePairEncoder(std::span<const std::string> tokens) {
  if (tokens.size() >= size_t(std::numeric_limits<int32_t>::max()))
    throw Error("BPE vocabulary too large");
  size_t total = 0;
  for (const std::string& t : tokens) total += t.size();
  if (total >= std::numeric_limits<uint32_t>::max()) throw Error("BPE vocabulary too large");
  blob_.reserve(total);
  offsets_.reserve(tokens.size() + 1);
  for (const std::string& t : tokens) {
    offsets_.push_back(uint32_t(blob_.size()));
    blob_ += t;
  }
  offsets_.push_back(uint32_t(blob_.size()));

  size_t cap = 16;
  while (cap < tokens.size() * 2) cap *= 2;
  table_.assign(cap, Slot{0, -1});
  mask_ = cap - 1;
  for (int32_t r = 0; r < int32_t(tokens.size()); ++r) {
    const std::string& t = tokens[size_t(r)];
    if (t.empty()) throw Error("BPE vocabulary: token " + std::to_string(r) + " is empty");
    const uint64_t h = hash_bytes(t.data(), t.size());
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = table_[i];
      if (s.rank < 0) {
        s = Slot{uint32_t(h >> 32), r};
        break;
      }
      if (s.tag == uint32_t(h >> 32) && token(s.rank) == t)
        throw Error("BPE vocabulary: token " + std::to_string(r) + " repeats token " + std::to_string(s.rank));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = char(b);
    byte_rank_[b] = find(std::string_view(&c, 1));
    if (byte_rank_[b] < 0)
      throw Error("BPE vocabulary lacks the single byte 0x" + std::string(1, "0123456789abcdef"[b >> 4]) +
                  "0123456789abcdef"[b & 15] + ", so not every input could be encoded");
  }
}

int32_t BytePairEncoder::find(std::string_view bytes) const {
  const uint64_t h = hash_bytes(bytes.data(), bytes.size());
  const uint32_t tag = uint32_t(h >> 32);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot s = table_[i];
    if (s.rank < 0) return -1;
    if (s.tag == tag) {
      const uint32_t b = offsets_[size_t(s.rank)], e = offsets_[size_t(s.rank) + 1];
      if (e - b == bytes.size() && std::memcmp(blob_.data() + b, bytes.data(), bytes.size()) == 0) return s.rank;
    }
  }
}

void BytePairEncoder::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(byte_rank_[uint8_t(piece[0])]);
    return;
  }
  // Most pieces of ordinary text are whole tokens.
  if (const int32_t r = find(piece); r >= 0) {
    out.push_back(r);
    return;
  }
  if (piece.size() <= 128)
    merge_small(piece, out);
  else
    merge_large(piece, out);
}

// Parts are kept in arrays; each step scans for the lowest pair rank (leftmost on ties), merges
// that pair and re-ranks its two neighbouring pairs. O(n^2) worst case, fast for short n.
void BytePairEncoder::merge_small(std::string_view piece, std::vector<int32_t>& out) const {
  constexpr size_t kMax = 129;
  uint32_t start[kMax + 1];  // part i is piece[start[i], start[i+1])
  int32_t tok[kMax];         // the token of part i
  int32_t pair[kMax];        // rank of parts i and i+1 joined, kNoRank if not a token
  size_t m = piece.size();   // number of parts
  const auto rank_of = [&](uint32_t b, uint32_t e) {
    const int32_t r = find(piece.substr(b, e - b));
    return r < 0 ? kNoRank : r;
  };
  for (size_t i = 0; i <= m; ++i) start[i] = uint32_t(i);
  for (size_t i = 0; i < m; ++i) tok[i] = byte_rank_[uint8_t(piece[i])];
  for (size_t i = 0; i + 1 < m; ++i) pair[i] = rank_of(start[i], start[i + 2]);
  while (m > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; ++i)
      if (pair[i] < pair[best]) best = i;
    if (pair[best] == kNoRank) break;
    tok[best] = pair[best];
    // Remove part best+1.
    for (size_t i = best + 1; i + 1 < m; ++i) {
      tok[i] = tok[i + 1];
      pair[i] = pair[i + 1];
    }
    for (size_t i = best + 1; i < m; ++i) start[i] = start[i + 1];
    --m;
    if (best + 1 < m) pair[best] = rank_of(start[best], start[best + 2]);
    if (best > 0) pair[best - 1] = rank_of(start[best - 1], start[best + 1]);
  }
  out.insert(out.end(), tok, tok + m);
}

// A doubly linked list of parts (each named by its first byte) and a min-heap of candidate
// pairs keyed (rank, position). Entries go stale when a neighbour merges; they are recognised
// on pop (the pair's span changed) and dropped. The heap's order is tiktoken's rule exactly.
void BytePairEncoder::merge_large(std::string_view piece, std::vector<int32_t>& out) const {
  const uint32_t n = uint32_t(piece.size());
  std::vector<uint32_t> next(n), prev(n);
  std::vector<int32_t> tok(n);
  std::vector<uint8_t> alive(n, 1);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? n : i - 1;  // n: none
    tok[i] = byte_rank_[uint8_t(piece[i])];
  }
  struct Cand {
    int32_t rank;
    uint32_t left, right, right_end;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  const auto push = [&](uint32_t left, uint32_t right) {
    const uint32_t right_end = next[right];
    const int32_t r = find(piece.substr(left, right_end - left));
    if (r >= 0) heap.push(Cand{r, left, right, right_end});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.left] || next[c.left] != c.right || !alive[c.right] || next[c.right] != c.right_end) continue;
    tok[c.left] = c.rank;
    alive[c.right] = 0;
    next[c.left] = c.right_end;
    if (c.right_end < n) prev[c.right_end] = c.left;
    if (prev[c.left] < n) push(prev[c.left], c.left);
    if (c.right_end < n) push(c.left, c.right_end);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(tok[i]);
}

}  // namespace kimi
