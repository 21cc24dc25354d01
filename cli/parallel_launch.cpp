#include "parallel_launch.h"

#include <signal.h>
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

namespace kimi::cli {

const std::set<std::string>& parallel_value_flags() {
  static const std::set<std::string> flags{
      "tensor-parallel-size",     "data-parallel-size",    "data-parallel-size-local",
      "data-parallel-start-rank", "data-parallel-address", "data-parallel-rpc-port",
      "tensor-parallel-rank",     "parallel-timeout"};
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
  p.tensor_parallel_rank = int(a.get_int("tensor-parallel-rank", 0));
  p.parallel_timeout_s = a.get_double("parallel-timeout", p.parallel_timeout_s);

  if (p.tensor_parallel_size < 1 || p.tensor_parallel_size > 256)
    throw Error("--tensor-parallel-size must be between 1 and 256");
  if (p.data_parallel_size < 1) throw Error("--data-parallel-size must be at least 1");
  if (p.data_parallel_size_local != -1 && (p.data_parallel_size_local < 0 || p.data_parallel_size_local > p.data_parallel_size))
    throw Error("--data-parallel-size-local must be between 0 and --data-parallel-size");
  if (p.data_parallel_start_rank < 0 || p.data_parallel_start_rank >= p.data_parallel_size)
    throw Error("--data-parallel-start-rank must be below --data-parallel-size");
  if (p.data_parallel_rpc_port < 1 || p.data_parallel_rpc_port > 65535)
    throw Error("--data-parallel-rpc-port must be a TCP port (1..65535)");
  if (p.tensor_parallel_rank < 0 || p.tensor_parallel_rank >= p.tensor_parallel_size)
    throw Error("--tensor-parallel-rank outside --tensor-parallel-size");
  if (!(p.parallel_timeout_s > 0)) throw Error("--parallel-timeout must be positive (seconds)");

  // Parsed, so a vLLM command line is understood, but not built yet: say so instead of running
  // something other than what was asked.
  if (p.data_parallel_size > 1 || a.has("data-parallel-size-local") || a.has("data-parallel-start-rank"))
    throw Error("data parallelism (--data-parallel-size > 1, --data-parallel-size-local, --data-parallel-start-rank) "
                "is not supported yet");
  // vLLM's expert-parallel size is tp * dp; with both 1 the flag changes nothing (one rank owns
  // every expert), so it is accepted as vLLM does, with a note.
  if (p.enable_expert_parallel && p.tensor_parallel_size == 1)
    std::fprintf(stderr, "kimi: --enable-expert-parallel with --tensor-parallel-size 1: one rank holds every "
                         "expert (no effect)\n");
  if (p.headless) throw Error("--headless is not supported yet (it needs data parallelism across nodes)");
  return p;
}

std::string parallel_identity(const std::string& model_dir, const ParallelArgs& p, const std::string& quantization) {
  std::ifstream f(std::filesystem::path(model_dir) / "config.json", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return "config " + parallel_fingerprint(ss.str()) + " tp=" + std::to_string(p.tensor_parallel_size) +
         " dp=" + std::to_string(p.data_parallel_size) + " ep=" + (p.enable_expert_parallel ? "1" : "0") +
         " quantization=" + quantization;
}

ParallelLaunch::ParallelLaunch(const ParallelArgs& p, int argc, char** argv, const std::string& identity) : args_(p) {
  if (p.tensor_parallel_size == 1) return;
  if (p.tensor_parallel_rank == 0) {
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    for (int r = 1; r < p.tensor_parallel_size; ++r) {
      std::vector<std::string> args(argv, argv + argc);
      args.push_back("--tensor-parallel-rank=" + std::to_string(r));
      std::vector<char*> cargs;
      for (auto& s : args) cargs.push_back(s.data());
      cargs.push_back(nullptr);
      std::fflush(nullptr);
      const pid_t pid = fork();
      if (pid < 0) throw Error("cannot start tensor-parallel rank " + std::to_string(r));
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // a rank never outlives the process that launched it
        if (getppid() == 1) _exit(1);
        execv(self.c_str(), cargs.data());
        _exit(127);
      }
      children_.push_back(pid);
    }
    reaped_.assign(children_.size(), false);
    watcher_ = std::thread([this] { watch_children(); });
  }
  try {
    WorldOptions o;
    o.rank = p.tensor_parallel_rank;
    o.size = p.tensor_parallel_size;
    o.store_host = p.data_parallel_address;
    o.store_port = p.data_parallel_rpc_port;
    o.serve_store = o.rank == 0;
    o.device_host = p.data_parallel_address;
    o.timeout = std::chrono::milliseconds(int64_t(p.parallel_timeout_s * 1000));
    o.identity = identity;
    world_ = std::make_unique<World>(o);
    std::vector<int> ranks;
    for (int r = 0; r < p.tensor_parallel_size; ++r) ranks.push_back(r);
    tp_ = world_->new_group("tp0", ranks);
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

void ParallelLaunch::watch_children() {
  while (!stopping_) {
    for (size_t i = 0; i < children_.size(); ++i) {
      int status = 0;
      if (reaped_[i] || waitpid(children_[i], &status, WNOHANG) != children_[i]) continue;
      reaped_[i] = true;
      // A rank leaves with 0 only after rank 0 told it to stop.
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      std::fprintf(stderr, "kimi: tensor-parallel rank %zu (pid %d) %s %d; exiting\n", i + 1, int(children_[i]),
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

int ParallelLaunch::threads_per_rank(int requested) const {
  if (requested > 0 || args_.tensor_parallel_size == 1) return requested;
  const int hw = int(std::thread::hardware_concurrency());
  return std::max(1, hw / args_.tensor_parallel_size);
}

}  // namespace kimi::cli
