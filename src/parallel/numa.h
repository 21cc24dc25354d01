#pragma once
// Where a node's ranks run on a machine with several NUMA nodes: each local rank gets its own
// share of the nodes (its CPUs and the memory next to them), so that a rank reads its weight
// shard from local memory and its threads do not compete with another rank's. The plan is a pure
// function of the topology (testable with any topology); libnuma reads the real one and applies
// a placement to this process. On a machine with one NUMA node there is nothing to place.
#include <optional>
#include <string>
#include <vector>

namespace kimi {

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;  // the CPUs of the node this process may run on
};

struct NumaPlacement {
  std::vector<int> nodes;  // memory: preferred on one node, interleaved over several
  std::vector<int> cpus;   // this rank's CPUs (disjoint from the other local ranks')
  int threads() const { return int(cpus.size()); }
  std::string describe() const;  // "node 1, cpus 8-15"
};

// The nodes with memory and CPUs this process may use (empty when libnuma finds no NUMA support).
std::vector<NumaNode> numa_topology();

// Local rank r of L: with L >= N nodes, rank r lives on node floor(r N / L) and gets a contiguous
// share of that node's CPUs (the node's ranks split them evenly: consecutive ranks, a replica's
// TP ranks, share a node); with L < N, rank r gets nodes [floor(r N / L), floor((r+1) N / L)).
// nullopt with fewer than two nodes or one rank: nothing to place. Throws when a node has fewer
// CPUs than ranks placed on it.
std::optional<NumaPlacement> plan_numa_placement(const std::vector<NumaNode>& topology, int local_ranks, int local_rank);

// Binds this process (every thread it starts later) to the placement's CPUs and its memory
// allocations to the placement's nodes (preferred, so a full node spills instead of failing).
void apply_numa_placement(const NumaPlacement& placement);

}  // namespace kimi
