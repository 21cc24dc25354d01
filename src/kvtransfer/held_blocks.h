#pragma once
// The producer's registry of KV blocks held for decode instances (vLLM NIXL's requests awaiting
// a consumer): each finished do_remote_decode request's blocks, under the remote_request_id the
// consumer will name, until the consumer pulls them or releases them, or until the hold times
// out (a consumer that died or never came: vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT). Ended holds
// queue up as block lists for the engine thread, which alone returns blocks to the pool.
// Thread-safe: the engine adds, the transfer thread pulls and releases.
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kimi::kvtransfer {

class HeldBlocks {
 public:
  using Clock = std::chrono::steady_clock;
  explicit HeldBlocks(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  void add(const std::string& id, std::vector<int32_t> blocks_tail_first, int64_t num_tokens);
  // Marks the hold in use (a timeout cannot end it meanwhile) and returns its blocks (position
  // order); nullopt: no such hold (never existed, released, timed out).
  std::optional<std::vector<int32_t>> begin_pull(const std::string& id);
  // Ends a hold: after a pull (in use), or on a consumer's release. False: no such hold.
  bool release(const std::string& id);
  // Ends the holds older than the timeout that nobody is pulling; returns how many.
  int64_t expire(Clock::time_point now = Clock::now());

  std::vector<std::vector<int32_t>> take_released();
  bool has_released() const;
  int64_t size() const;
  int64_t num_released_total() const;
  int64_t num_expired_total() const;

 private:
  struct Hold {
    std::vector<int32_t> blocks_tail_first;
    int64_t num_tokens = 0;
    Clock::time_point since;
    bool in_use = false;
  };
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::map<std::string, Hold> holds_;
  std::vector<std::vector<int32_t>> released_;
  int64_t released_total_ = 0, expired_total_ = 0;
};

}  // namespace kimi::kvtransfer
