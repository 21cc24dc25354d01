#include "model/parallel_linear.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace kimi {

void TensorParallel::check(const ModelConfig& c) const {
  auto need = [](int64_t n, int64_t v, const char* what, const char* kind) {
    if (v % n != 0)
      throw Error(std::string(kind) + " size " + std::to_string(n) + " does not divide " + what + " (" +
                  std::to_string(v) + ")");
  };
  const int64_t n = size();
  need(n, c.num_attention_heads, "num_attention_heads", "tensor parallel");
  need(n, c.intermediate_size, "intermediate_size", "tensor parallel");
  if (c.n_routed_experts == 0) return;
  // Shared experts are split over the TP group; routed ones over routed_experts()' ranks.
  if (c.n_shared_experts > 0)
    need(n, c.moe_intermediate_size * c.n_shared_experts, "the shared experts' width", "tensor parallel");
  const int64_t m = routed_experts().size();
  if (!expert_parallel) {
    need(m, c.moe_intermediate_size, "moe_intermediate_size", "tensor parallel (routed experts)");
    return;
  }
  if (c.n_routed_experts % m != 0)
    throw Error("expert parallel size " + std::to_string(m) + " does not divide n_routed_experts (" +
                std::to_string(c.n_routed_experts) + "): each rank must own the same number of whole experts");
}

ExpertRange TensorParallel::experts(const ModelConfig& c) const {
  if (!expert_parallel) return {0, c.n_routed_experts};
  const int64_t per = c.n_routed_experts / size();
  return {rank() * per, per};
}

ModelConfig TensorParallel::attention_shard(const ModelConfig& c) const {
  ModelConfig s = c;
  s.num_attention_heads = c.num_attention_heads / size();
  return s;
}

WeightMatrix column_parallel(const WeightMatrix& w, const TensorParallel& tp, int64_t unit) {
  if (tp.size() == 1) return w;
  const int64_t units = w.rows / unit;
  if (w.rows % unit != 0 || units % tp.size() != 0)
    throw Error("column-parallel split of " + std::to_string(w.rows) + " rows over " + std::to_string(tp.size()) +
                " ranks");
  const int64_t per = units / tp.size() * unit;
  return w.row_slice(tp.rank() * per, per);
}

WeightMatrix row_parallel(const WeightMatrix& w, const TensorParallel& tp, OwnedWeightBuffers& owned) {
  if (tp.size() == 1) return w;
  const int64_t n = tp.size();
  if (w.cols % n != 0)
    throw Error("row-parallel split of " + std::to_string(w.cols) + " columns over " + std::to_string(n) + " ranks");
  const int64_t cols = w.cols / n, c0 = tp.rank() * cols;
  WeightMatrix s = w;
  s.cols = cols;
  auto copy_strided = [&](const void* src, size_t src_row_bytes, size_t offset, size_t row_bytes) {
    auto& buf = owned.emplace_back(size_t(w.rows) * row_bytes);
    for (int64_t r = 0; r < w.rows; ++r)
      std::memcpy(buf.data() + size_t(r) * row_bytes,
                  static_cast<const uint8_t*>(src) + size_t(r) * src_row_bytes + offset, row_bytes);
    return static_cast<const void*>(buf.data());
  };
  if (w.format == WeightFormat::Dense) {
    const size_t e = dtype_size(w.dtype);
    s.data = copy_strided(w.data, size_t(w.cols) * e, size_t(c0) * e, size_t(cols) * e);
    return s;
  }
  // Integer formats: whole groups per rank (per-channel scales apply to every slice unchanged).
  const bool per_channel = w.group_size == w.cols;
  if (!per_channel && cols % w.group_size != 0)
    throw Error("tensor parallel size " + std::to_string(n) + " would split a quantization group of " +
                std::to_string(w.group_size) + " (a row-parallel slice of " + std::to_string(cols) + " columns)");
  if (w.format == WeightFormat::Int4Group && cols % 2 != 0)
    throw Error("tensor parallel size " + std::to_string(n) + " leaves an odd number of int4 columns per rank (" +
                std::to_string(cols) + ")");
  const size_t bits = w.format == WeightFormat::Int4Group ? 4 : 8;
  s.data = copy_strided(w.data, size_t(w.cols) * bits / 8, size_t(c0) * bits / 8, size_t(cols) * bits / 8);
  if (per_channel) {
    s.group_size = cols;
    return s;  // scales and zero points: one per row, shared by every slice
  }
  const size_t groups = size_t(w.cols / w.group_size), mine = size_t(cols / w.group_size);
  const size_t g0 = size_t(c0 / w.group_size);
  if (w.scales) {
    const size_t e = dtype_size(w.scale_dtype);
    s.scales = copy_strided(w.scales, groups * e, g0 * e, mine * e);
  }
  if (w.zero_points)
    s.zero_points = static_cast<const uint8_t*>(copy_strided(w.zero_points, groups, g0, mine));
  return s;
}

}  // namespace kimi

namespace kimi {

MoeExchange parse_moe_exchange(const std::string& name) {
  if (name == "naive") return MoeExchange::Naive;
  if (name == "allgather_reducescatter") return MoeExchange::AllGatherReduceScatter;
  if (name == "alltoallv") return MoeExchange::AllToAll;
  throw Error("--all2all-backend must be naive, allgather_reducescatter or alltoallv, not '" + name + "'");
}

const char* moe_exchange_name(MoeExchange e) {
  switch (e) {
    case MoeExchange::Naive: return "naive";
    case MoeExchange::AllGatherReduceScatter: return "allgather_reducescatter";
    case MoeExchange::AllToAll: return "alltoallv";
  }
  return "?";
}

}  // namespace kimi
