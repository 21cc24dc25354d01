#include "parallel/process_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
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
