#include "parallel/numa.h"

#include <numa.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "common/error.h"

namespace kimi {

namespace {

// "0-3,8,10-11"
std::string ranges(const std::vector<int>& values) {
  std::string s;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(values[i]);
    if (j > i) s += '-' + std::to_string(values[j]);
    i = j + 1;
  }
  return s;
}

struct BitmaskFree {
  void operator()(bitmask* b) const { numa_bitmask_free(b); }
};
using Bitmask = std::unique_ptr<bitmask, BitmaskFree>;

}  // namespace

std::string NumaPlacement::describe() const {
  return std::string(nodes.size() == 1 ? "node " : "nodes ") + ranges(nodes) + ", cpus " + ranges(cpus);
}

std::vector<NumaNode> numa_topology() {
  std::vector<NumaNode> nodes;
  if (numa_available() < 0) return nodes;
  const int max_node = numa_max_node();
  Bitmask cpus(numa_allocate_cpumask());
  for (int n = 0; n <= max_node; ++n) {
    if (!numa_bitmask_isbitset(numa_all_nodes_ptr, unsigned(n))) continue;  // no memory, or not ours
    if (numa_node_to_cpus(n, cpus.get()) != 0) continue;
    NumaNode node{n, {}};
    for (unsigned c = 0; c < cpus->size; ++c)
      if (numa_bitmask_isbitset(cpus.get(), c) && numa_bitmask_isbitset(numa_all_cpus_ptr, c)) node.cpus.push_back(int(c));
    if (!node.cpus.empty()) nodes.push_back(std::move(node));  // memory-only nodes run nothing
  }
  return nodes;
}

std::optional<NumaPlacement> plan_numa_placement(const std::vector<NumaNode>& topology, int local_ranks, int local_rank) {
  const int N = int(topology.size()), L = local_ranks, r = local_rank;
  if (N < 2 || L < 2) return std::nullopt;
  if (r < 0 || r >= L) throw Error("numa: local rank " + std::to_string(r) + " outside 0.." + std::to_string(L - 1));
  NumaPlacement p;
  if (L < N) {
    for (int n = r * N / L; n < (r + 1) * N / L; ++n) {
      p.nodes.push_back(topology[size_t(n)].id);
      p.cpus.insert(p.cpus.end(), topology[size_t(n)].cpus.begin(), topology[size_t(n)].cpus.end());
    }
    std::sort(p.cpus.begin(), p.cpus.end());
    return p;
  }
  const int n = int(int64_t(r) * N / L);
  // The ranks on node n: those r' with floor(r' N / L) == n, consecutive.
  int first = r, last = r;
  while (first > 0 && int(int64_t(first - 1) * N / L) == n) --first;
  while (last + 1 < L && int(int64_t(last + 1) * N / L) == n) ++last;
  const std::vector<int>& cpus = topology[size_t(n)].cpus;
  const int share = last - first + 1, index = r - first, C = int(cpus.size());
  if (C < share)
    throw Error("numa: node " + std::to_string(topology[size_t(n)].id) + " has " + std::to_string(C) + " CPUs for " +
                std::to_string(share) + " ranks");
  p.nodes = {topology[size_t(n)].id};
  p.cpus.assign(cpus.begin() + index * C / share, cpus.begin() + (index + 1) * C / share);
  return p;
}

void apply_numa_placement(const NumaPlacement& placement) {
  if (placement.cpus.empty() || placement.nodes.empty()) throw Error("numa: an empty placement");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : placement.cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    throw Error("numa: cannot bind to cpus (" + placement.describe() + "): " + std::strerror(errno));
  if (numa_available() < 0) return;
  if (placement.nodes.size() == 1) {
    numa_set_preferred(placement.nodes[0]);
    return;
  }
  Bitmask nodes(numa_allocate_nodemask());
  for (int n : placement.nodes) numa_bitmask_setbit(nodes.get(), unsigned(n));
  numa_set_interleave_mask(nodes.get());
}

}  // namespace kimi
