#include "parallel/process_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/math.h>

#include "parallel/collective_error.h"

namespace kimi {

GlooProcessGroup::GlooProcessGroup(std::string name, std::shared_ptr<gloo::Context> context,
                                   std::chrono::milliseconds timeout)
    : name_(std::move(name)), context_(std::move(context)), timeout_(timeout) {}

GlooProcessGroup::~GlooProcessGroup() = default;

int GlooProcessGroup::rank() const { return context_->rank; }
int GlooProcessGroup::size() const { return context_->size; }

template <class F>
void GlooProcessGroup::guarded(const char* what, CollectiveCounter* counter, size_t bytes, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
    if (counter) {
      ++counter->calls;
      counter->bytes += int64_t(bytes);
      counter->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // gloo::IoException (peer gone, timeout), gloo::EnforceNotMet
    throw CollectiveError("process group '" + name_ + "' (rank " + std::to_string(rank()) + " of " + std::to_string(size()) +
                "): " + what + " failed: a peer rank died or did not answer within " +
                std::to_string(timeout_.count()) + " ms (" + e.what() + ")");
  }
}

void GlooProcessGroup::all_reduce_sum(std::span<float> data) {
  if (size() == 1 || data.empty()) return;
  guarded("all-reduce", &stats_.all_reduce, data.size_bytes(), [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag_++);
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

void GlooProcessGroup::all_gather(std::span<const std::byte> in, std::span<std::byte> out) {
  if (out.size() != in.size() * size_t(size())) throw Error("all_gather: output must be size() x input");
  if (size() == 1) {
    std::copy(in.begin(), in.end(), out.begin());
    return;
  }
  if (in.empty()) return;
  guarded("all-gather", &stats_.all_gather, in.size(), [&] {
    gloo::AllgatherOptions opts(context_);
    // Gloo reads the input through a non-const buffer but does not write it.
    opts.setInput(const_cast<std::byte*>(in.data()), in.size());
    opts.setOutput(out.data(), out.size());
    opts.setTag(tag_++);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

void GlooProcessGroup::all_to_all(std::span<const std::byte> in, std::span<const int64_t> send_bytes,
                                  std::span<std::byte> out, std::span<const int64_t> recv_bytes) {
  const size_t n = size_t(size());
  if (send_bytes.size() != n || recv_bytes.size() != n) throw Error("all_to_all: one size per rank");
  int64_t sent = 0, received = 0;
  for (size_t q = 0; q < n; ++q) {
    if (send_bytes[q] < 0 || recv_bytes[q] < 0) throw Error("all_to_all: a negative size");
    sent += send_bytes[q];
    received += recv_bytes[q];
  }
  if (size_t(sent) != in.size() || size_t(received) != out.size()) throw Error("all_to_all: sizes do not add up to the buffers");
  if (n == 1) {
    std::copy(in.begin(), in.end(), out.begin());
    return;
  }
  // Gloo wants a buffer even for nothing: a byte of our own stands in for an empty side.
  std::byte none_in{}, none_out{};
  guarded("all-to-all", &stats_.all_to_all, size_t(sent - send_bytes[size_t(rank())]), [&] {
    gloo::AlltoallvOptions opts(context_);
    // Gloo reads the input through a non-const buffer but does not write it.
    opts.setInput(in.empty() ? &none_in : const_cast<std::byte*>(in.data()),
                  std::vector<int64_t>(send_bytes.begin(), send_bytes.end()));
    opts.setOutput(out.empty() ? &none_out : out.data(), std::vector<int64_t>(recv_bytes.begin(), recv_bytes.end()));
    opts.setTag(tag_++);
    opts.setTimeout(timeout_);
    gloo::alltoallv(opts);
  });
}

void GlooProcessGroup::broadcast(std::span<std::byte> data, int root) {
  if (root < 0 || root >= size()) throw Error("broadcast: no rank " + std::to_string(root));
  if (size() == 1 || data.empty()) return;
  guarded("broadcast", &stats_.broadcast, data.size(), [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setRoot(root);
    opts.setTag(tag_++);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

void GlooProcessGroup::barrier() {
  if (size() == 1) return;
  guarded("barrier", nullptr, 0, [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag_++);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace kimi
