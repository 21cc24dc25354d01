#include "kvtransfer/held_blocks.h"

namespace kimi::kvtransfer {

void HeldBlocks::add(const std::string& id, std::vector<int32_t> blocks_tail_first, int64_t num_tokens) {
  std::lock_guard lock(mu_);
  holds_[id] = Hold{std::move(blocks_tail_first), num_tokens, Clock::now(), false};
}

std::optional<std::vector<int32_t>> HeldBlocks::begin_pull(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = holds_.find(id);
  if (it == holds_.end()) return std::nullopt;
  it->second.in_use = true;
  return std::vector<int32_t>(it->second.blocks_tail_first.rbegin(), it->second.blocks_tail_first.rend());
}

bool HeldBlocks::release(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = holds_.find(id);
  if (it == holds_.end()) return false;
  released_.push_back(std::move(it->second.blocks_tail_first));
  holds_.erase(it);
  ++released_total_;
  return true;
}

int64_t HeldBlocks::expire(Clock::time_point now) {
  std::lock_guard lock(mu_);
  int64_t n = 0;
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (!it->second.in_use && now - it->second.since >= timeout_) {
      released_.push_back(std::move(it->second.blocks_tail_first));
      it = holds_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  expired_total_ += n;
  return n;
}

std::vector<std::vector<int32_t>> HeldBlocks::take_released() {
  std::lock_guard lock(mu_);
  return std::exchange(released_, {});
}

bool HeldBlocks::has_released() const {
  std::lock_guard lock(mu_);
  return !released_.empty();
}

int64_t HeldBlocks::size() const {
  std::lock_guard lock(mu_);
  return int64_t(holds_.size());
}

int64_t HeldBlocks::num_released_total() const {
  std::lock_guard lock(mu_);
  return released_total_;
}

int64_t HeldBlocks::num_expired_total() const {
  std::lock_guard lock(mu_);
  return expired_total_;
}

}  // namespace kimi::kvtransfer
