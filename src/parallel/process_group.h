#pragma once
// A group of ranks joined by a Gloo context (full mesh over Gloo's TCP transport): the
// Communicator the parallel layers use. Gloo's failures (a peer that died: connection reset;
// one that stopped answering: the group's timeout) come out as kimi::Error naming the group.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace gloo {
class Context;
}

namespace kimi {

// What this rank has put through one kind of collective: calls, payload bytes (the buffer's
// size; a ring all-reduce sends about 2 (size - 1) / size of it per rank; an all-to-all: the bytes
// this rank sends to the others) and wall time.
struct CollectiveCounter {
  int64_t calls = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

struct CollectiveStats {
  CollectiveCounter all_reduce, all_gather, broadcast, all_to_all;
};

class GlooProcessGroup final : public Communicator {
 public:
  GlooProcessGroup(std::string name, std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout);
  ~GlooProcessGroup() override;

  const std::string& name() const { return name_; }
  int rank() const override;
  int size() const override;
  void all_reduce_sum(std::span<float> data) override;
  void all_gather(std::span<const std::byte> in, std::span<std::byte> out) override;
  void all_to_all(std::span<const std::byte> in, std::span<const int64_t> send_bytes, std::span<std::byte> out,
                  std::span<const int64_t> recv_bytes) override;
  void broadcast(std::span<std::byte> data, int root) override;
  void barrier() override;
  const CollectiveStats& stats() const { return stats_; }

 private:
  template <class F>
  void guarded(const char* what, CollectiveCounter* counter, size_t bytes, F&& f);

  std::string name_;
  std::shared_ptr<gloo::Context> context_;
  std::chrono::milliseconds timeout_;
  uint32_t tag_ = 0;  // one per collective, in the order every rank makes them
  CollectiveStats stats_;
};

}  // namespace kimi
