#include "parallel_launch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "engine/dp_executor.h"
#include "engine/tp_executor.h"
#include "parallel/numa.h"

namespace kimi::cli {

const std::set<std::string>& parallel_value_flags() {
  static const std::set<std::string> flags{
      "tensor-parallel-size",     "data-parallel-size",    "data-parallel-size-local",
      "data-parallel-start-rank", "data-parallel-address", "data-parallel-rpc-port",
      "parallel-local-rank",      "parallel-timeout",      "numa",
      "all2all-backend"};
  return flags;
}

const std::set<std::string>& parallel_bool_flags() {
  static const std::set<std::string> flags{"headless", "enable-expert-parallel"};
  return flags;
}

ParallelArgs parse_parallel_args(const Args& a) {
  ParallelArgs p;
  p.tensor_parallel_size = int(a.get_int("tensor-parallel-size", 1));
  p.data_parallel_size = int(a.get_int("data-parallel-size", 1));
  p.data_parallel_size_local = int(a.get_int("data-parallel-size-local", -1));
  p.data_parallel_start_rank = int(a.get_int("data-parallel-start-rank", 0));
  p.data_parallel_address = a.get("data-parallel-address", p.data_parallel_address);
  p.data_parallel_rpc_port = int(a.get_int("data-parallel-rpc-port", p.data_parallel_rpc_port));
  p.headless = a.has("headless");
  p.enable_expert_parallel = a.has("enable-expert-parallel");
  p.local_rank = int(a.get_int("parallel-local-rank", 0));
  p.parallel_timeout_s = a.get_double("parallel-timeout", p.parallel_timeout_s);
  p.numa = a.get("numa", p.numa);
  if (p.numa != "auto" && p.numa != "none") throw Error("--numa must be auto or none, not '" + p.numa + "'");
  p.moe_exchange = parse_moe_exchange(a.get("all2all-backend", moe_exchange_name(p.moe_exchange)));

  if (p.tensor_parallel_size < 1 || p.tensor_parallel_size > 256)
    throw Error("--tensor-parallel-size must be between 1 and 256");
  if (p.data_parallel_size < 1) throw Error("--data-parallel-size must be at least 1");
  if (p.data_parallel_size_local != -1 && (p.data_parallel_size_local < 0 || p.data_parallel_size_local > p.data_parallel_size))
    throw Error("--data-parallel-size-local must be between 0 and --data-parallel-size");
  if (p.data_parallel_start_rank < 0 || p.data_parallel_start_rank >= p.data_parallel_size)
    throw Error("--data-parallel-start-rank must be below --data-parallel-size");
  if (p.data_parallel_rpc_port < 1 || p.data_parallel_rpc_port > 65535)
    throw Error("--data-parallel-rpc-port must be a TCP port (1..65535)");
  if (!(p.parallel_timeout_s > 0)) throw Error("--parallel-timeout must be positive (seconds)");
  if (p.data_parallel_size_local == -1) p.data_parallel_size_local = p.data_parallel_size - p.data_parallel_start_rank;
  if (p.data_parallel_start_rank + p.data_parallel_size_local > p.data_parallel_size)
    throw Error("--data-parallel-start-rank + --data-parallel-size-local exceed --data-parallel-size");
  // The API server drives every replica's engine from world rank 0 (replica 0): the node that
  // has it serves, every other node is --headless and starts at a later replica.
  if (p.headless && p.data_parallel_start_rank == 0)
    throw Error("--headless needs --data-parallel-start-rank >= 1: the API server's node runs data-parallel rank 0");
  if (!p.headless && p.data_parallel_start_rank > 0)
    throw Error("--data-parallel-start-rank > 0 is for a node without the API server: add --headless");
  if (p.data_parallel_size_local < 1) throw Error("--data-parallel-size-local must be at least 1 on a node");
  if (p.local_rank < 0 || p.local_rank >= p.data_parallel_size_local * p.tensor_parallel_size)
    throw Error("--parallel-local-rank outside this node's ranks");
  // vLLM's expert-parallel size is tp * dp; with both 1 the flag changes nothing (one rank owns
  // every expert), so it is accepted as vLLM does, with a note.
  if (p.enable_expert_parallel && p.tensor_parallel_size * p.data_parallel_size == 1)
    std::fprintf(stderr, "kimi: --enable-expert-parallel with --tensor-parallel-size 1 and --data-parallel-size 1: one "
                         "rank holds every expert (no effect)\n");
  return p;
}

std::string parallel_identity(const std::string& model_dir, const ParallelArgs& p, const std::string& quantization) {
  std::ifstream f(std::filesystem::path(model_dir) / "config.json", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return "config " + parallel_fingerprint(ss.str()) + " tp=" + std::to_string(p.tensor_parallel_size) +
         " dp=" + std::to_string(p.data_parallel_size) + " ep=" + (p.enable_expert_parallel ? "1" : "0") +
         " quantization=" + quantization +
         " all2all=" + moe_exchange_name(p.moe_exchange);
}

namespace {

// The address this host reaches `host` from (the source address the kernel picks for it): what
// the other nodes can connect to, with no configuration on a single network. KIMI_HOST_IP, when
// set, wins (as VLLM_HOST_IP does for vLLM).
std::string local_address_towards(const std::string& host, int port) {
  if (const char* ip = std::getenv("KIMI_HOST_IP"); ip && *ip) return ip;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return host;
  std::string out = host;
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {  // UDP: nothing is sent
    sockaddr_in self{};
    socklen_t len = sizeof self;
    char buf[INET_ADDRSTRLEN];
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0 &&
        inet_ntop(AF_INET, &self.sin_addr, buf, sizeof buf))
      out = buf;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

std::vector<int> rank_range(int first, int count, int stride = 1) {
  std::vector<int> r;
  for (int i = 0; i < count; ++i) r.push_back(first + i * stride);
  return r;
}

}  // namespace

ParallelLaunch::ParallelLaunch(const ParallelArgs& p, int argc, char** argv, const std::string& identity) : args_(p) {
  const int tp = p.tensor_parallel_size, dp = p.data_parallel_size;
  local_ranks_ = p.data_parallel_size_local * tp;
  world_rank_ = p.data_parallel_start_rank * tp + p.local_rank;
  if (tp * dp == 1) return;
  if (p.local_rank == 0) {
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    for (int r = 1; r < local_ranks_; ++r) {
      std::vector<std::string> args(argv, argv + argc);
      args.push_back("--parallel-local-rank=" + std::to_string(r));
      std::vector<char*> cargs;
      for (auto& s : args) cargs.push_back(s.data());
      cargs.push_back(nullptr);
      std::fflush(nullptr);
      const pid_t pid = fork();
      if (pid < 0) throw Error("cannot start local rank " + std::to_string(r));
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // a rank never outlives the process that launched it
        if (getppid() == 1) _exit(1);
        execv(self.c_str(), cargs.data());
        _exit(127);
      }
      children_.push_back(pid);
    }
    reaped_.assign(children_.size(), false);
  }
  try {
    // After the forks (each spawned rank places itself) and before this process starts a thread:
    // the binding is per thread and inherited by the threads started later.
    if (p.numa == "auto") place_on_numa_nodes();
    if (!children_.empty()) watcher_ = std::thread([this] { watch_children(); });
    WorldOptions o;
    o.rank = world_rank_;
    o.size = tp * dp;
    o.store_host = p.data_parallel_address;
    o.store_port = p.data_parallel_rpc_port;
    o.serve_store = world_rank_ == 0;
    o.device_host = p.data_parallel_start_rank == 0 ? p.data_parallel_address
                                                    : local_address_towards(p.data_parallel_address, p.data_parallel_rpc_port);
    o.timeout = std::chrono::milliseconds(int64_t(p.parallel_timeout_s * 1000));
    o.identity = identity;
    world_ = std::make_unique<World>(o);
    // Every rank creates the groups it belongs to in one global order (TP groups, DP groups,
    // rank 0's links to the replica leaders, all ranks), so that no two wait on each other.
    const int replica = world_rank_ / tp, index = world_rank_ % tp;
    if (tp > 1) tp_ = world_->new_group("tp" + std::to_string(replica), rank_range(replica * tp, tp));
    if (dp > 1) {
      dp_ = world_->new_group("dp" + std::to_string(index), rank_range(index, dp, tp));
      for (int d = 1; d < dp; ++d)
        if (world_rank_ == 0 || world_rank_ == d * tp)
          links_.push_back(world_->new_group("link" + std::to_string(d), {0, d * tp}));
      moe_ = world_->new_group("moe", rank_range(0, tp * dp));
    }
  } catch (...) {
    // Not joined: the spawned ranks would only wait for their own timeout.
    stopping_ = true;
    if (watcher_.joinable()) watcher_.join();
    for (size_t i = 0; i < children_.size(); ++i)
      if (!reaped_[i]) {
        kill(children_[i], SIGKILL);
        waitpid(children_[i], nullptr, 0);
      }
    throw;
  }
}

void ParallelLaunch::configure(ModelOptions& options) const {
  options.tensor_parallel = tp_;
  options.expert_parallel = args_.enable_expert_parallel;
  options.data_parallel = dp_;
  options.expert_group = moe_;
  options.moe_exchange = args_.moe_exchange;
}

void ParallelLaunch::run_worker(Model& model, size_t kv_cache_bytes) const {
  if (world_rank_ % args_.tensor_parallel_size != 0) return run_tensor_parallel_worker(model);
  if (links_.size() != 1) throw Error("internal: a data-parallel leader without its link to rank 0");
  run_data_parallel_leader(model, *links_[0], kv_cache_bytes);
}

DataParallelReplicas ParallelLaunch::replicas() const {
  DataParallelReplicas r;
  if (world_rank_ != 0) return r;
  for (const auto& link : links_) {
    r.kv_cache_bytes.push_back(receive_replica_kv_cache_bytes(*link));
    r.executors.push_back([link](const KvCacheConfig& kv) -> std::unique_ptr<Executor> {
      return std::make_unique<DataParallelClient>(link, kv);
    });
  }
  return r;
}

void ParallelLaunch::watch_children() {
  while (!stopping_) {
    for (size_t i = 0; i < children_.size(); ++i) {
      int status = 0;
      if (reaped_[i] || waitpid(children_[i], &status, WNOHANG) != children_[i]) continue;
      reaped_[i] = true;
      // A rank leaves with 0 only after rank 0 told it to stop.
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      const int rank = world_rank_ + int(i) + 1, tp = args_.tensor_parallel_size;
      std::fprintf(stderr, "kimi: rank %d (data-parallel replica %d, tensor-parallel rank %d; pid %d) %s %d; exiting\n",
                   rank, rank / tp, rank % tp, int(children_[i]),
                   WIFEXITED(status) ? "exited with status" : "was killed by signal",
                   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      std::fflush(stderr);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

ParallelLaunch::~ParallelLaunch() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  links_.clear();
  moe_.reset();
  dp_.reset();
  tp_.reset();
  world_.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (size_t i = 0; i < children_.size(); ++i) {
    if (reaped_[i]) continue;
    const pid_t pid = children_[i];
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

void ParallelLaunch::place_on_numa_nodes() {
  const std::vector<NumaNode> topology = numa_topology();
  placement_ = plan_numa_placement(topology, local_ranks_, args_.local_rank);
  if (!placement_) return;
  apply_numa_placement(*placement_);
  std::fprintf(stderr, "numa: rank %d (local rank %d of %d on %zu NUMA nodes): %s\n", world_rank_, args_.local_rank,
               local_ranks_, topology.size(), placement_->describe().c_str());
}

int ParallelLaunch::threads_per_rank(int requested) const {
  if (requested > 0 || local_ranks_ == 1) return requested;
  if (placement_) return placement_->threads();
  const int hw = int(std::thread::hardware_concurrency());
  return std::max(1, hw / local_ranks_);
}

}  // namespace kimi::cli
