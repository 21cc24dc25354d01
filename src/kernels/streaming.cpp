// The CPU-dependent part of the streaming rules (streaming.h).
#include "kernels/streaming.h"

#include "kernels/cpu_features.h"

namespace kimi::kernels {

int int4_stream_runs() { return cpu_features().intel ? 2 : 1; }

}  // namespace kimi::kernels
