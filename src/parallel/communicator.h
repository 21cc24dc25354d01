#pragma once
// The collectives a parallel layer needs from its group of ranks (tensor-parallel linears,
// the multi-process executor), independent of the library that carries them (Gloo today:
// parallel/process_group.h). Every call is collective: all ranks of the group make it in the
// same order with the same sizes. A peer that dies or stops answering surfaces as kimi::Error
// within the group's timeout, never as a hang.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kimi {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[i] = sum over ranks of data[i].
  virtual void all_reduce_sum(std::span<float> data) = 0;
  // out = the ranks' `in` concatenated in rank order (out.size() == size() * in.size()).
  virtual void all_gather(std::span<const std::byte> in, std::span<std::byte> out) = 0;
  // Personalised exchange: `in` holds send_bytes[q] bytes for each rank q, in rank order; `out`
  // receives recv_bytes[q] bytes from each rank q, in rank order (each side knows its sizes;
  // both lists have size() entries; the piece for this rank itself is copied).
  virtual void all_to_all(std::span<const std::byte> in, std::span<const int64_t> send_bytes, std::span<std::byte> out,
                          std::span<const int64_t> recv_bytes) = 0;
  // data on every rank = data on `root`.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  virtual void barrier() = 0;

  // A message whose size only the root knows: the size goes first, then the bytes.
  void broadcast_bytes(std::vector<std::byte>& data, int root);
};

}  // namespace kimi
