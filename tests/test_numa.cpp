// Placing a node's ranks on NUMA nodes: the plan over made-up topologies, and the binding applied
// to a forked process on this machine's real node 0.
#include <gtest/gtest.h>

#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "parallel/numa.h"

namespace kimi {
namespace {

std::vector<NumaNode> machine(int nodes, int cpus_per_node) {
  std::vector<NumaNode> t;
  for (int n = 0; n < nodes; ++n) {
    NumaNode node{n, {}};
    for (int c = 0; c < cpus_per_node; ++c) node.cpus.push_back(n * cpus_per_node + c);
    t.push_back(node);
  }
  return t;
}

TEST(NumaPlacement, NothingToPlaceOnOneNodeOrForOneRank) {
  EXPECT_FALSE(plan_numa_placement({}, 4, 1));
  EXPECT_FALSE(plan_numa_placement(machine(1, 8), 4, 1));
  EXPECT_FALSE(plan_numa_placement(machine(2, 8), 1, 0));
}

TEST(NumaPlacement, RanksSplitEachNodesCpusAndShareNoCpu) {
  // tp 2 x dp 2 on two nodes of 8 CPUs: a replica's two TP ranks (consecutive) share a node.
  const auto topo = machine(2, 8);
  std::vector<int> seen;
  for (int r = 0; r < 4; ++r) {
    const auto p = plan_numa_placement(topo, 4, r);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->nodes, std::vector<int>{r / 2});
    EXPECT_EQ(p->threads(), 4);
    EXPECT_EQ(p->cpus.front(), r * 4);
    seen.insert(seen.end(), p->cpus.begin(), p->cpus.end());
  }
  std::vector<int> all(16);
  for (int c = 0; c < 16; ++c) all[size_t(c)] = c;
  EXPECT_EQ(seen, all);
  EXPECT_EQ(plan_numa_placement(topo, 4, 3)->describe(), "node 1, cpus 12-15");
}

TEST(NumaPlacement, UnevenRanksAndFewerRanksThanNodes) {
  // 3 ranks on 2 nodes (rank r on node floor(2r / 3)): ranks 0 and 1 split node 0, rank 2 has node 1.
  const auto two = machine(2, 6);
  EXPECT_EQ(plan_numa_placement(two, 3, 0)->cpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan_numa_placement(two, 3, 1)->cpus, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(plan_numa_placement(two, 3, 2)->cpus, (std::vector<int>{6, 7, 8, 9, 10, 11}));
  // 2 ranks on 4 nodes: each rank gets two whole nodes (memory interleaved over them).
  const auto four = machine(4, 2);
  const auto p = plan_numa_placement(four, 2, 1);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->nodes, (std::vector<int>{2, 3}));
  EXPECT_EQ(p->cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(p->describe(), "nodes 2-3, cpus 4-7");
  // Node ids as the machine numbers them (a node without CPUs was left out of the topology).
  std::vector<NumaNode> sparse{{0, {0, 1}}, {2, {4, 5}}};
  EXPECT_EQ(plan_numa_placement(sparse, 2, 1)->nodes, std::vector<int>{2});
}

TEST(NumaPlacement, MoreRanksThanCpusIsAClearError) {
  try {
    plan_numa_placement(machine(2, 1), 4, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 0 has 1 CPUs for 2 ranks"), std::string::npos) << e.what();
  }
}

TEST(NumaPlacement, TopologyOfThisMachineCoversItsCpus) {
  const auto topo = numa_topology();
  if (numa_available() < 0) GTEST_SKIP() << "no NUMA support in this kernel";
  ASSERT_FALSE(topo.empty());
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  size_t cpus = 0;
  for (const auto& n : topo) {
    cpus += n.cpus.size();
    for (int c : n.cpus) EXPECT_TRUE(CPU_ISSET(c, &set)) << "cpu " << c << " of node " << n.id << " is not ours";
  }
  EXPECT_EQ(cpus, size_t(CPU_COUNT(&set)));
}

// The binding, in a child (it is per process): one CPU of node 0 and memory preferred there.
TEST(NumaPlacement, ApplyBindsCpusAndPrefersTheNodesMemory) {
  const auto topo = numa_topology();
  if (topo.empty()) GTEST_SKIP() << "no NUMA support in this kernel";
  NumaPlacement p{{topo[0].id}, {topo[0].cpus.back()}};
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      apply_numa_placement(p);
    } catch (...) {
      _exit(2);
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1 || !CPU_ISSET(p.cpus[0], &set)) _exit(3);
    int mode = -1;
    unsigned long mask = 0;
    if (get_mempolicy(&mode, &mask, sizeof(mask) * 8, nullptr, 0) != 0) _exit(4);
    if (mode != MPOL_PREFERRED || !(mask & (1ul << p.nodes[0]))) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: apply threw, 3: cpus not bound, 4/5: memory policy not preferred node";
}

}  // namespace
}  // namespace kimi
