#include "structured/token_mask.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace kimi::structured {

namespace {
constexpr size_t kMaxCachedMasks = 4096;
constexpr size_t kMaxCacheBytes = size_t(64) << 20;
}  // namespace

TokenVocab::TokenVocab(const std::vector<std::string>& bytes, const std::vector<bool>& special, int64_t vocab_size)
    : bytes_(bytes), special_(special), vocab_size_(vocab_size) {
  special_.resize(bytes_.size(), true);
  std::vector<int32_t> order;
  for (size_t id = 0; id < bytes_.size() && int64_t(id) < vocab_size; ++id) {
    if (special_[id]) bytes_[id] = special_token_bytes(int32_t(id));
    else if (bytes_[id].find(char(0xFF)) != std::string::npos) continue;
    if (!bytes_[id].empty()) order.push_back(int32_t(id));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  // Preorder over the sorted strings: a node per distinct prefix; open nodes on a path stack
  // get their skip when the next string leaves their subtree.
  std::vector<uint32_t> path;  // node indices of the current prefix
  std::string prev;
  for (int32_t id : order) {
    const std::string& s = bytes_[size_t(id)];
    size_t common = 0;
    while (common < prev.size() && common < s.size() && common < path.size() && prev[common] == s[common]) ++common;
    while (path.size() > common) {
      nodes_[path.back()].skip = uint32_t(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(uint32_t(nodes_.size()));
      nodes_.push_back({uint8_t(s[d]), uint32_t(d + 1), 0, 0, 0});
    }
    Node& last = nodes_[path.back()];
    if (last.tok_begin == last.tok_end) last.tok_begin = last.tok_end = uint32_t(token_ids_.size());
    token_ids_.push_back(id);
    last.tok_end = uint32_t(token_ids_.size());
    max_depth_ = std::max<uint32_t>(max_depth_, uint32_t(s.size()));
    prev = s;
  }
  for (uint32_t n : path) nodes_[n].skip = uint32_t(nodes_.size());
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const Tokenizer& tok, int64_t vocab_size) {
  std::vector<std::string> bytes(size_t(tok.vocab_size()));
  std::vector<bool> special(bytes.size());
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    special[size_t(id)] = tok.is_special(id);
    if (!special[size_t(id)]) bytes[size_t(id)] = std::string(tok.token_bytes(id));
  }
  return std::make_shared<const TokenVocab>(bytes, special, vocab_size);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Recognizer> rec, std::shared_ptr<const TokenVocab> vocab,
                               std::vector<int32_t> end_ids)
    : rec_(std::move(rec)), vocab_(std::move(vocab)), end_ids_(std::move(end_ids)), state_(rec_->initial()) {
  levels_.resize(vocab_->max_depth() + 1);
}

void GrammarMatcher::compute(std::vector<uint64_t>& out) {
  out.assign(vocab_->words(), 0);
  bool any = false;
  if (state_.can_continue()) {
    const auto& nodes = vocab_->nodes();
    const auto& ids = vocab_->token_ids();
    levels_[0] = state_;
    for (size_t i = 0; i < nodes.size();) {
      const TokenVocab::Node& nd = nodes[i];
      if (!rec_->advance(levels_[nd.depth - 1], nd.byte, levels_[nd.depth])) {
        i = nd.skip;
        continue;
      }
      for (uint32_t k = nd.tok_begin; k < nd.tok_end; ++k) {
        const int32_t id = ids[k];
        out[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
        any = true;
      }
      // A state that can no longer continue cannot extend to longer tokens.
      i = levels_[nd.depth].can_continue() ? i + 1 : nd.skip;
    }
  }
  if (state_.complete || !any)
    for (int32_t id : end_ids_)
      if (id >= 0 && id < vocab_->size()) out[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
}

const std::vector<uint64_t>& GrammarMatcher::mask() {
  if (finished_) {  // after the end token: only end tokens (the engine stops the sequence anyway)
    current_.assign(vocab_->words(), 0);
    for (int32_t id : end_ids_)
      if (id >= 0 && id < vocab_->size()) current_[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
    return current_;
  }
  std::string key = state_.key();
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  compute(current_);
  if (cache_.size() < kMaxCachedMasks && (cache_.size() + 1) * vocab_->words() * 8 <= kMaxCacheBytes)
    return cache_.emplace(std::move(key), current_).first->second;
  return current_;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (finished_) return false;
  if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) {
    // Normally only offered once the text is complete; at a dead end it is all that is offered.
    finished_ = true;
    return true;
  }
  if (id < 0 || id >= vocab_->size() || size_t(id) >= vocab_->token_count()) return false;
  ParseState a = state_, b;
  for (char c : vocab_->bytes(id)) {
    if (!rec_->advance(a, uint8_t(c), b)) return false;
    std::swap(a, b);
  }
  state_ = std::move(a);
  return true;
}

}  // namespace kimi::structured
